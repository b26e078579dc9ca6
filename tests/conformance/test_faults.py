"""tierlog.conformance.faults.UploadPause: stops the first upload at exactly ``at`` bytes."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any

import pytest

from tierlog.conformance.faults import UploadPause
from tierlog.storage.objectstore.backend import Operation, RequestObserver

DATA = bytes(range(256)) * 64  # 16 KiB


def test_the_first_upload_stops_at_the_byte_then_goes_on() -> None:
    pause = UploadPause(at=5000)
    inner = io.BytesIO(DATA)
    source = pause.wrap(inner)
    read: list[bytes] = []

    def upload() -> None:
        while chunk := source.read(1024):
            read.append(chunk)

    uploader = threading.Thread(target=upload)
    uploader.start()
    assert pause.paused.wait(60)
    try:
        # Stopped exactly at the byte: the source was read up to it, not one byte further.
        assert inner.tell() == 5000
        assert b"".join(read) == DATA[: sum(map(len, read))]
    finally:
        pause.resume()
    uploader.join(60)
    assert not uploader.is_alive() and b"".join(read) == DATA


def test_a_retry_passes_through() -> None:
    pause = UploadPause(at=10)
    pause.wrap(io.BytesIO(b""))
    retry = io.BytesIO(DATA)
    assert pause.wrap(retry) is retry


def test_a_forgotten_resume_fails_the_upload() -> None:
    pause = UploadPause(at=1, resume_timeout_s=0.01)
    source = pause.wrap(io.BytesIO(DATA))
    assert source.read(1) == DATA[:1]
    with pytest.raises(TimeoutError, match="never resumed"):
        source.read(1)


def test_a_negative_position_is_refused() -> None:
    with pytest.raises(ValueError, match="at must be"):
        UploadPause(at=-1)


def test_pause_uploads_pauses_the_first_copy_of_an_object_store_rsm(tmp_path: Path) -> None:
    """``pause_uploads`` on a real object-store RSM: its first copy stops mid-upload (nothing
    published yet), goes on when resumed, and reads back whole; ``observe`` sees the requests."""
    from tierlog.conformance.rsm_suite import SegmentFactory, read_stream, segment_metadata
    from tierlog.spi import RemoteResourceNotFoundException, TopicIdPartition, Uuid
    from tierlog.storage.objectstore.memory import MemoryObjectStoreRSM

    seen: list[str] = []

    class Observed(UploadPause):
        def observe(self, observer: RequestObserver) -> RequestObserver:
            def observed(operation: Operation, **kw: Any) -> None:
                seen.append(operation)
                observer(operation, **kw)

            return observed

    pause = Observed(at=100_000)
    rsm = pause.pause_uploads(MemoryObjectStoreRSM())
    rsm.configure(MemoryObjectStoreRSM.conformance_config())
    files = SegmentFactory(tmp_path).create(size=300_000)
    metadata = segment_metadata(TopicIdPartition(Uuid.random(), "t", 0), size=300_000)
    copy = threading.Thread(target=rsm.copy_log_segment_data, args=(metadata, files.data))
    copy.start()
    try:
        assert pause.paused.wait(60)
        with pytest.raises(RemoteResourceNotFoundException):
            rsm.fetch_log_segment(metadata, 0)
    finally:
        pause.resume()
    copy.join(60)
    assert not copy.is_alive()
    assert read_stream(rsm.fetch_log_segment(metadata, 0)) == files.segment
    assert seen
    rsm.close()
