"""``upload_parts`` and ``PartReader``: the parallel part uploader of the S3 and Azure backends.

The memory tests count live part buffers directly: ``parts._new_buffer`` is swapped for a
weak-referenceable ``bytearray`` subclass, and every buffer ever allocated is watched. An
implementation that keeps one buffer too many (the first part held by the caller, or a slot
released by the future's done callback while the executor still holds the task's arguments)
fails them deterministically. That the pipeline does fill up is not left to timing either: the
uploads hold their parts until ``parallelism`` buffers were seen alive (``BufferWatch.hold``).

The failure tests order the parts' ends with events and the parts' futures (``Recording``),
never with sleeps: which failure comes first, and how far the reader got, do not depend on the
machine's load.
"""

from __future__ import annotations

import io
import random
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor, wait
from typing import Any, BinaryIO, TypeVar, cast

import pytest

from tierlog.storage.objectstore import parts as parts_module
from tierlog.storage.objectstore.backend import PartReader, UploadedParts, upload_parts
from tierlog.storage.objectstore.parts import PartReader as PartReaderDirect

T = TypeVar("T")

PART = 1000

DEADLINE_S = 60.0
"""How long a test waits for something that happens at once on an idle machine."""


class TrackedBuffer(bytearray):
    """A part buffer that can be watched with a weak reference."""

    __slots__ = ("__weakref__",)


class BufferWatch:
    """Every part buffer allocated while installed, and the most alive at any sampled moment."""

    def __init__(self) -> None:
        self._refs: list[weakref.ref[TrackedBuffer]] = []
        self._lock = threading.Lock()
        self._grew = threading.Condition(self._lock)
        self._hold_deadline: float | None = None
        self.max_alive = 0

    def allocate(self, size: int) -> bytearray:
        buffer = TrackedBuffer(size)
        with self._lock:
            self._refs.append(weakref.ref(buffer))
        return buffer

    def alive(self) -> int:
        """Part buffers alive now (an empty one, the end of a source, is not a buffer)."""
        with self._lock:
            buffers = [ref() for ref in self._refs]
        return sum(1 for buffer in buffers if buffer is not None and len(buffer) > 0)

    def sample(self) -> int:
        n = self.alive()
        with self._lock:
            if n > self.max_alive:
                self.max_alive = n
                self._grew.notify_all()
        return n

    def hold(self, until_alive: int) -> None:
        """Wait until ``until_alive`` buffers have been seen alive at once: an upload that calls
        this keeps its part until the reader has filled the pipeline. Gives up after
        ``DEADLINE_S`` in all (an implementation that never gets there then fails the test's
        ``max_alive`` check, once, not after a wait per part)."""
        with self._lock:
            if self._hold_deadline is None:
                self._hold_deadline = time.monotonic() + DEADLINE_S
            while self.max_alive < until_alive:
                left = self._hold_deadline - time.monotonic()
                if left <= 0:
                    return
                self._grew.wait(left)


@pytest.fixture
def watch(monkeypatch: pytest.MonkeyPatch) -> BufferWatch:
    found = BufferWatch()
    monkeypatch.setattr(parts_module, "_new_buffer", found.allocate)
    return found


class Source(io.RawIOBase):
    """``data`` read at most ``max_read`` bytes at a time (short reads), sampling the live
    buffers on every read (the buffer being filled is one of them); ``fail_at``: reading at or
    past that offset raises ``OSError``."""

    def __init__(
        self,
        data: bytes,
        *,
        max_read: int | None = None,
        watch: BufferWatch | None = None,
        fail_at: int | None = None,
    ) -> None:
        super().__init__()
        self.data = data
        self.position = 0
        self.reads = 0
        self._max_read = max_read
        self._watch = watch
        self._fail_at = fail_at

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        self.reads += 1
        if self._watch is not None:
            self._watch.sample()
        if self._fail_at is not None and self.position >= self._fail_at:
            raise OSError(f"injected read failure at {self.position}")
        view = memoryview(buffer).cast("B")
        n = min(len(view), len(self.data) - self.position)
        if self._max_read is not None:
            n = min(n, self._max_read)
        view[:n] = self.data[self.position : self.position + n]
        self.position += n
        return n


class ReadOnlySource:
    """A source with ``read`` only (no ``readinto``), giving short reads."""

    def __init__(self, data: bytes, max_read: int) -> None:
        self._stream = io.BytesIO(data)
        self._max_read = max_read

    def read(self, n: int = -1) -> bytes:
        return self._stream.read(min(n, self._max_read) if n >= 0 else self._max_read)


class Recording(Executor):
    """A thread pool that keeps the future of every call, in the order of the calls (part
    ``i``'s is ``future(i)``): a part's upload can wait for another part's task to end, which is
    after ``upload_parts`` recorded that part's failure.

    With ``settle_after``, the futures handed to ``upload_parts`` complete only once the first
    ``settle_after`` calls have all ended: it then sees those parts end only after every one of
    their failures was recorded, whichever it looks at first.
    """

    def __init__(self, workers: int, settle_after: int = 0) -> None:
        self._pool = ThreadPoolExecutor(workers)
        self._futures: list[Future[Any]] = []
        self._submitted = threading.Condition()
        self._settle_after = settle_after
        self._unsettled: list[tuple[Future[Any], Future[Any]]] = []
        self._ended = 0

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        outer: Future[T] | None = None
        if self._settle_after:
            outer = Future()
            outer.set_running_or_notify_cancel()
        future = self._pool.submit(fn, *args, **kwargs)
        with self._submitted:
            self._futures.append(future)
            self._submitted.notify_all()
        if outer is None:
            return future
        future.add_done_callback(lambda inner: self._ended_one(inner, outer))
        return outer

    def _ended_one(self, inner: Future[Any], outer: Future[Any]) -> None:
        with self._submitted:
            self._ended += 1
            self._unsettled.append((inner, outer))
            if self._ended < self._settle_after:
                return
            settle, self._unsettled = self._unsettled, []
        for done, handed in settle:
            error = done.exception()
            if error is not None:
                handed.set_exception(error)
            else:
                handed.set_result(done.result())

    def future(self, index: int) -> Future[Any]:
        with self._submitted:
            if not self._submitted.wait_for(lambda: len(self._futures) > index, DEADLINE_S):
                raise AssertionError(f"part {index} was never submitted")
            return self._futures[index]

    def wait_ended(self, index: int) -> None:
        """Wait until part ``index``'s task ended (its failure, if any, recorded)."""
        done, _ = wait([self.future(index)], timeout=DEADLINE_S)
        assert done, f"part {index} did not end"

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)


class LingeringExecutor(Executor):
    """Runs each call on a thread pool but keeps its arguments referenced for ``linger``
    seconds after completing its future, as ``ThreadPoolExecutor``'s work items do until their
    worker moves on; a slot released at the future's completion would let the next part be
    read while the finished part is still alive."""

    def __init__(self, workers: int, linger: float = 0.02) -> None:
        self._pool = ThreadPoolExecutor(workers)
        self._linger = linger

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as error:
                future.set_exception(error)
            time.sleep(self._linger)  # `args` is still referenced by this closure

        self._pool.submit(run)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)


def data_of(size: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)


def collect(
    delay: Callable[[int], float] = lambda index: 0.0,
    watch: BufferWatch | None = None,
    fill: int = 0,
) -> tuple[Callable[[int, bytearray], tuple[int, bytes]], list[int]]:
    """An ``upload_part`` that returns ``(index, bytes)`` after ``delay(index)`` seconds (to
    finish in a shuffled order; nothing waits on it), sampling the live buffers, and the list of
    indexes in the order their calls started. With ``fill``, each call first holds its part
    until ``fill`` buffers were alive at once (``BufferWatch.hold``)."""
    started: list[int] = []
    lock = threading.Lock()

    def upload(index: int, data: bytearray) -> tuple[int, bytes]:
        with lock:
            started.append(index)
        if watch is not None:
            watch.sample()
            if fill:
                watch.hold(fill)
        time.sleep(delay(index))
        return index, bytes(data)

    return upload, started


# Order and content ----------------------------------------------------------------------------
def test_results_come_back_in_part_order_whatever_order_parts_finish() -> None:
    data = data_of(10 * PART + 17)
    rng = random.Random(5)
    delays = [rng.uniform(0, 0.02) for _ in range(11)]
    upload, _ = collect(lambda i: delays[i])
    sent = upload_parts(PartReader(io.BytesIO(data), PART), upload, parallelism=4)
    assert isinstance(sent, UploadedParts)
    assert [index for index, _ in sent.results] == list(range(11))
    assert [len(part) for _, part in sent.results] == [PART] * 10 + [17]
    assert b"".join(part for _, part in sent.results) == data
    assert sent.size == len(data)


def test_parts_are_full_whatever_the_short_reads() -> None:
    data = data_of(5 * PART + 1)
    upload, _ = collect()
    sent = upload_parts(PartReader(Source(data, max_read=77), PART), upload, parallelism=2)
    assert [len(part) for _, part in sent.results] == [PART] * 5 + [1]
    assert b"".join(part for _, part in sent.results) == data


def test_a_source_without_readinto_is_read_with_read() -> None:
    data = data_of(3 * PART + 5)
    upload, _ = collect()
    source = cast(BinaryIO, ReadOnlySource(data, max_read=300))
    sent = upload_parts(PartReader(source, PART), upload, parallelism=2)
    assert [len(part) for _, part in sent.results] == [PART] * 3 + [5]
    assert b"".join(part for _, part in sent.results) == data


def test_a_known_size_is_never_read_past() -> None:
    data = data_of(10 * PART)
    source = Source(data)
    upload, _ = collect()
    reader = PartReader(source, PART, size=2 * PART + 300)
    sent = upload_parts(reader, upload, parallelism=3)
    assert [len(part) for _, part in sent.results] == [PART, PART, 300]
    assert sent.size == 2 * PART + 300
    assert source.position == 2 * PART + 300, "read past the announced size"


def test_a_size_that_is_a_multiple_of_the_part_needs_no_extra_read() -> None:
    source = Source(data_of(2 * PART))
    upload, _ = collect()
    sent = upload_parts(PartReader(source, PART, size=2 * PART), upload, parallelism=2)
    assert sent.size == 2 * PART
    assert source.reads == 2


def test_an_unknown_size_ending_on_a_part_boundary_has_no_empty_part() -> None:
    data = data_of(3 * PART)
    upload, _ = collect()
    sent = upload_parts(PartReader(io.BytesIO(data), PART), upload, parallelism=2)
    assert [len(part) for _, part in sent.results] == [PART] * 3


@pytest.mark.parametrize("size", [None, 0], ids=["unknown-size", "size-0"])
def test_an_empty_source_uploads_no_part(size: int | None) -> None:
    upload, started = collect()
    sent = upload_parts(PartReader(io.BytesIO(b""), PART, size), upload, parallelism=3)
    assert sent.results == []
    assert sent.size == 0
    assert started == []


def test_a_source_shorter_than_its_size_reports_what_it_had() -> None:
    """The caller compares ``size`` with what it announced (and raises its own message)."""
    upload, _ = collect()
    sent = upload_parts(
        PartReader(io.BytesIO(data_of(1500)), PART, 4 * PART), upload, parallelism=2
    )
    assert sent.size == 1500
    assert len(sent.results) == 2


# The first part, read ahead --------------------------------------------------------------------
def test_read_whole_returns_a_source_that_fits_in_one_part() -> None:
    reader = PartReader(Source(b"x" * 999, max_read=100), PART)
    whole = reader.read_whole()
    assert whole == b"x" * 999
    assert reader.ended


def test_read_whole_keeps_the_first_part_for_upload_parts() -> None:
    data = data_of(2 * PART + 3)
    reader = PartReader(io.BytesIO(data), PART)
    assert reader.read_whole() is None
    upload, started = collect()
    sent = upload_parts(reader, upload, parallelism=2)
    assert started[0] == 0
    assert b"".join(part for _, part in sent.results) == data
    other = PartReader(io.BytesIO(data), PART)
    other.read_part()
    with pytest.raises(RuntimeError, match="first part only"):
        other.read_whole()


def test_a_source_of_exactly_one_part_is_not_whole() -> None:
    """Whether more follows is unknown until the next read: it goes the multipart way."""
    reader = PartReader(io.BytesIO(b"y" * PART), PART)
    assert reader.read_whole() is None
    upload, _ = collect()
    sent = upload_parts(reader, upload, parallelism=2)
    assert [len(part) for _, part in sent.results] == [PART]


# Memory ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_at_most_parallelism_buffers_are_alive(watch: BufferWatch, parallelism: int) -> None:
    """Sampled on every read (the buffer being filled counts) and at the start of every
    upload: never more than ``parallelism``, and the pipeline does fill up."""
    data = data_of(20 * PART + 1)
    upload, _ = collect(watch=watch, fill=parallelism)
    source = Source(data, max_read=400, watch=watch)
    sent = upload_parts(PartReader(source, PART), upload, parallelism=parallelism)
    assert b"".join(part for _, part in sent.results) == data
    assert watch.max_alive == parallelism
    assert watch.alive() == 0


def test_the_first_part_read_ahead_counts_as_one_of_them(watch: BufferWatch) -> None:
    """The caller that read the first part ahead does not hold it during the upload (the old
    S3 and Azure code did: parallelism + 1 buffers)."""
    data = data_of(12 * PART)
    source = Source(data, watch=watch)
    reader = PartReader(source, PART)
    assert reader.read_whole() is None
    upload, _ = collect(watch=watch, fill=3)
    upload_parts(reader, upload, parallelism=3)
    assert watch.max_alive == 3
    assert watch.alive() == 0


def test_a_slot_is_freed_only_when_the_task_dropped_its_buffer(watch: BufferWatch) -> None:
    """An executor that keeps each call's arguments after the call (``ThreadPoolExecutor``
    does, until the worker takes its next work item): the next part is still read only once
    the finished part's buffer is gone."""
    data = data_of(12 * PART)
    upload, _ = collect(watch=watch, fill=2)
    executor = LingeringExecutor(workers=8, linger=0.02)
    try:
        sent = upload_parts(
            PartReader(Source(data, watch=watch), PART), upload, parallelism=2, executor=executor
        )
    finally:
        executor.shutdown()
    assert len(sent.results) == 12
    assert watch.max_alive == 2


def test_a_shared_executor_bounds_each_upload_by_its_own_parallelism(
    watch: BufferWatch,
) -> None:
    data = data_of(10 * PART)
    with ThreadPoolExecutor(8) as executor:
        upload, _ = collect(watch=watch, fill=2)
        sent = upload_parts(
            PartReader(Source(data, watch=watch), PART), upload, parallelism=2, executor=executor
        )
    assert len(sent.results) == 10
    assert watch.max_alive == 2


# Failures -------------------------------------------------------------------------------------
class PartFailed(Exception):
    pass


def test_a_failed_part_stops_the_reading_and_its_error_is_raised(watch: BufferWatch) -> None:
    """A part after the failing part 3 ends only once part 3's task ended (its failure
    recorded), so the reader cannot get ahead of the failure whatever the scheduling: part 4
    may be in flight (both slots are then taken), part 5 is never read."""
    data = data_of(100 * PART)
    source = Source(data, watch=watch)
    calls: list[int] = []
    lock = threading.Lock()
    executor = Recording(workers=2)

    def upload(index: int, data: bytearray) -> None:
        with lock:
            calls.append(index)
        if index == 3:
            raise PartFailed(f"part {index}")
        if index > 3:
            executor.wait_ended(3)

    try:
        with pytest.raises(PartFailed, match="part 3"):
            upload_parts(PartReader(source, PART), upload, parallelism=2, executor=executor)
    finally:
        executor.shutdown()
    assert source.position <= 5 * PART, f"read {source.position // PART} parts after a failure"
    assert max(calls) <= 4
    assert watch.alive() <= 1  # at most the failed part, held by its traceback


def test_the_first_failure_is_raised_not_a_later_one() -> None:
    """Part 0 fails only once part 1's task ended, so part 1's failure was recorded first; and
    ``upload_parts`` sees neither part end before both failures were recorded. The error raised
    is part 1's, though part 0 comes first in part order and failed last."""
    executor = Recording(workers=2, settle_after=2)

    def upload(index: int, data: bytearray) -> None:
        if index == 1:
            raise PartFailed("first failure (part 1)")
        if index == 0:
            executor.wait_ended(1)
            raise PartFailed("second failure (part 0)")

    try:
        with pytest.raises(PartFailed, match="first failure"):
            upload_parts(
                PartReader(io.BytesIO(data_of(5 * PART)), PART),
                upload,
                parallelism=2,
                executor=executor,
            )
    finally:
        executor.shutdown()


def test_parts_not_started_are_cancelled_and_running_ones_waited_for(
    watch: BufferWatch,
) -> None:
    """One worker shared, three slots: when part 0 fails, parts 1 and 2 are queued behind it.
    They never run, their buffers are dropped, and nothing runs after ``upload_parts``
    raised."""
    data = data_of(20 * PART)
    calls: list[int] = []
    running = 0
    lock = threading.Lock()
    release = threading.Event()

    def upload(index: int, data: bytearray) -> None:
        nonlocal running
        with lock:
            calls.append(index)
            running += 1
        try:
            if index == 0:
                # Until the reader has queued parts 1 and 2 behind us.
                assert release.wait(DEADLINE_S), "parts 1 and 2 were never read"
                raise PartFailed("part 0")
            time.sleep(0.01)
        finally:
            with lock:
                running -= 1

    class Reading(Source):
        def readinto(self, buffer: Any) -> int:
            n = super().readinto(buffer)
            if self.position >= 3 * PART:  # part 2 read: parts 1 and 2 wait behind part 0
                release.set()
            return n

    with ThreadPoolExecutor(1) as executor:
        with pytest.raises(PartFailed):
            upload_parts(
                PartReader(Reading(data, watch=watch), PART),
                upload,
                parallelism=3,
                executor=executor,
            )
        assert running == 0, "a part still running after upload_parts returned"
        executor.submit(lambda: None).result()  # the queue has been drained
    assert calls == [0], "a part uploaded after another failed"
    assert watch.alive() <= 1  # part 0's, held by the traceback of its error


@pytest.mark.parametrize("shared", [False, True], ids=["own-pool", "shared-executor"])
def test_a_read_failure_is_raised_after_the_parts_in_flight_ended(shared: bool) -> None:
    """The read of part 2 fails once parts 0 and 1 are uploading (not merely queued, which
    would be cancelled); each upload takes a little time (work, not synchronisation) so that
    returning without waiting for them would find them unfinished. A shared executor is not
    shut down by ``upload_parts``: only its own wait stands between the error and the return."""
    data = data_of(10 * PART)
    finished: list[int] = []
    uploading = threading.Semaphore(0)

    def upload(index: int, data: bytearray) -> None:
        uploading.release()
        time.sleep(0.03)
        finished.append(index)

    class FailingOnceUploading(Source):
        def readinto(self, buffer: Any) -> int:
            if self.position >= 2 * PART:
                for _ in range(2):
                    assert uploading.acquire(timeout=DEADLINE_S), "parts 0 and 1 never started"
            return super().readinto(buffer)

    source = FailingOnceUploading(data, fail_at=2 * PART)
    executor = ThreadPoolExecutor(4) if shared else None
    try:
        with pytest.raises(OSError, match="injected read failure"):
            upload_parts(PartReader(source, PART), upload, parallelism=4, executor=executor)
        assert sorted(finished) == [0, 1], "upload_parts returned with parts still in flight"
    finally:
        if executor is not None:
            executor.shutdown()


def test_a_part_beyond_max_parts_raises_the_callers_error() -> None:
    upload, started = collect()

    def too_many() -> Exception:
        return ValueError("more than 3 parts of 1000 bytes")

    source = Source(data_of(10 * PART))
    with pytest.raises(ValueError, match="more than 3 parts"):
        upload_parts(
            PartReader(source, PART),
            upload,
            parallelism=2,
            max_parts=3,
            too_many_parts=too_many,
        )
    assert set(started) <= {0, 1, 2}
    assert source.position == 4 * PART  # the fourth part was read, then refused


def test_exactly_max_parts_is_fine() -> None:
    upload, _ = collect()
    sent = upload_parts(
        PartReader(io.BytesIO(data_of(3 * PART)), PART), upload, parallelism=2, max_parts=3
    )
    assert len(sent.results) == 3


def test_the_own_pool_is_shut_down() -> None:
    before = {t.name for t in threading.enumerate()}
    upload, _ = collect(lambda i: 0.001)
    upload_parts(
        PartReader(io.BytesIO(data_of(6 * PART)), PART),
        upload,
        parallelism=3,
        thread_name_prefix="test-parts-pool",
    )
    with pytest.raises(PartFailed):

        def failing(index: int, data: bytearray) -> None:
            raise PartFailed

        upload_parts(
            PartReader(io.BytesIO(data_of(6 * PART)), PART),
            failing,
            parallelism=3,
            thread_name_prefix="test-parts-pool",
        )
    left = {t.name for t in threading.enumerate()} - before
    assert not [name for name in left if name.startswith("test-parts-pool")]


# Arguments ------------------------------------------------------------------------------------
def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="part_size"):
        PartReader(io.BytesIO(b""), 0)
    with pytest.raises(ValueError, match="size"):
        PartReader(io.BytesIO(b""), PART, -1)
    upload, _ = collect()
    with pytest.raises(ValueError, match="parallelism"):
        upload_parts(PartReader(io.BytesIO(b"x"), PART), upload, parallelism=0)


def test_exported_next_to_read_up_to() -> None:
    assert PartReader is PartReaderDirect
