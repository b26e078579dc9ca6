"""tierlog.conformance.faults.UploadPause: stops the first upload at exactly ``at`` bytes."""

from __future__ import annotations

import io
import threading

import pytest

from tierlog.conformance.faults import UploadPause

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
