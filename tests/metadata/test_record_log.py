"""The embedded RLMM's record log: framing, durability, crash recovery and streaming reads.

The file is checked with ``struct`` and ``zlib`` directly (not through ``RecordLog``), so a bug
in the reader cannot hide one in the writer.
"""

from __future__ import annotations

import logging
import os
import stat
import struct
import threading
import tracemalloc
import zlib
from pathlib import Path

import pytest

from tierlog.metadata._record_log import HEADER, MAX_PAYLOAD_BYTES, RecordLog, frame
from tierlog.spi import CorruptRecordError, IllegalStateError, InvalidArgumentError

PAYLOADS = [b"first record", b"\x00\x01\x02", b"x" * 300]


def _parse(data: bytes) -> list[bytes]:
    """An independent parser of the documented format."""
    out, pos = [], 0
    while pos < len(data):
        length, crc = struct.unpack_from(">II", data, pos)
        payload = data[pos + 8 : pos + 8 + length]
        assert len(payload) == length and zlib.crc32(payload) == crc
        out.append(payload)
        pos += 8 + length
    return out


def _write_log(path: Path, payloads: list[bytes]) -> bytes:
    with RecordLog(path) as log:
        log.append(payloads)
    return path.read_bytes()


# Framing -----------------------------------------------------------------------------------------
def test_entries_are_length_crc_payload(tmp_path: Path) -> None:
    path = tmp_path / "p.log"
    with RecordLog(path) as log:
        assert log.append(PAYLOADS[:2]) == 1
        assert log.append(PAYLOADS[2:]) == 2
        assert log.next_offset == 3
    data = path.read_bytes()
    expected = b"".join(struct.pack(">II", len(p), zlib.crc32(p)) + p for p in PAYLOADS)
    assert data == expected
    assert _parse(data) == PAYLOADS


def test_offsets_continue_after_reopen_and_read_streams_them(tmp_path: Path) -> None:
    path = tmp_path / "p.log"
    _write_log(path, PAYLOADS)
    with RecordLog(path) as log:
        assert log.next_offset == 3
        assert log.append([b"fourth"]) == 3
        assert list(log.read()) == [(i, p) for i, p in enumerate([*PAYLOADS, b"fourth"])]
        assert list(log.read(2)) == [(2, PAYLOADS[2]), (3, b"fourth")]
        assert list(log.read(10)) == []


def test_empty_payloads_and_batches_are_refused(tmp_path: Path) -> None:
    with RecordLog(tmp_path / "p.log") as log:
        with pytest.raises(InvalidArgumentError):
            log.append([b""])
        with pytest.raises(InvalidArgumentError):
            log.append([])
        with pytest.raises(InvalidArgumentError):
            frame(b"x" * (MAX_PAYLOAD_BYTES + 1))
        assert log.next_offset == 0
    assert (tmp_path / "p.log").read_bytes() == b""


def test_append_fsyncs_the_written_data_before_returning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each append fsyncs the file after the bytes are written; creating the file also fsyncs
    its directory (or a crash could lose the file itself)."""
    synced: list[tuple[bool, int]] = []  # (is a directory, size when fsynced)
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        st = os.fstat(fd)
        synced.append((stat.S_ISDIR(st.st_mode), st.st_size))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    log = RecordLog(tmp_path / "p.log")
    assert [is_dir for is_dir, _ in synced] == [True], "creating the file fsyncs its directory"
    synced.clear()
    log.append([b"abc"])
    assert synced == [(False, len(frame(b"abc")))], "append must fsync after writing"
    log.append([b"de", b"f"])
    assert synced[-1] == (False, len(frame(b"abc")) + len(frame(b"de")) + len(frame(b"f")))
    assert len(synced) == 2, "one fsync per append, whatever the batch size"
    log.close()


def test_a_failed_fsync_cuts_the_file_back_and_refuses_further_appends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "p.log"
    log = RecordLog(path)
    log.append([b"kept"])
    size = path.stat().st_size

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError):
        log.append([b"lost"])
    monkeypatch.undo()
    assert path.stat().st_size == size, "a failed append must not leave a partial entry"
    with pytest.raises(IllegalStateError, match="reopen"):
        log.append([b"later"])
    log.close()
    with RecordLog(path) as reopened:
        assert [p for _, p in reopened.read()] == [b"kept"]
        assert reopened.append([b"later"]) == 1


# Recovery ----------------------------------------------------------------------------------------
def test_a_torn_tail_of_every_length_is_truncated_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A crash can stop a write after any byte of an entry: every such tail is dropped with a
    WARNING naming the file, the position and the bytes dropped, and appends continue."""
    good = _write_log(tmp_path / "good.log", PAYLOADS)
    torn_entry = frame(b"the entry being written when the power went out")
    for cut in range(1, len(torn_entry)):
        path = tmp_path / f"torn-{cut}.log"
        path.write_bytes(good + torn_entry[:cut])
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="tierlog.metadata._record_log"):
            log = RecordLog(path)
        messages = [r.getMessage() for r in caplog.records]
        assert len(messages) == 1, (cut, messages)
        assert str(path) in messages[0]
        assert f"byte {len(good)}" in messages[0]
        assert f"dropping {cut} byte(s)" in messages[0]
        assert path.read_bytes() == good
        assert log.append([b"after the crash"]) == len(PAYLOADS)
        log.close()
        caplog.clear()
        with RecordLog(path) as reopened:
            assert [p for _, p in reopened.read()] == [*PAYLOADS, b"after the crash"]
        assert not caplog.records


@pytest.mark.parametrize(
    "tail",
    [b"\x00" * 40, frame(b"complete but damaged")[:-1] + b"\xff", struct.pack(">II", 0, 0)],
    ids=["zero-filled", "crc-mismatch-at-eof", "zero-length"],
)
def test_a_damaged_final_entry_is_a_torn_tail(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, tail: bytes
) -> None:
    """Zeros (a file extended but not written), or a last entry whose CRC fails and which ends
    at EOF, are what an interrupted write leaves: truncated, not an error."""
    path = tmp_path / "p.log"
    good = _write_log(path, PAYLOADS)
    path.write_bytes(good + tail)
    with caplog.at_level(logging.WARNING), RecordLog(path) as log:
        assert [p for _, p in log.read()] == PAYLOADS
    assert path.read_bytes() == good
    assert "torn tail" in caplog.text


def _corrupt(path: Path, position: int, data: bytes) -> bytes:
    raw = bytearray(path.read_bytes())
    raw[position : position + len(data)] = data
    path.write_bytes(bytes(raw))
    return bytes(raw)


@pytest.mark.parametrize("where", ["payload", "crc", "length-huge", "length-small", "length-zero"])
def test_damage_before_valid_entries_raises_and_leaves_the_file_untouched(
    tmp_path: Path, where: str
) -> None:
    """A bad entry followed by valid-looking data is corruption of acknowledged data: opening
    raises CorruptRecordError naming the file and position, and changes nothing on disk."""
    path = tmp_path / "p.log"
    _write_log(path, PAYLOADS)
    second = len(frame(PAYLOADS[0]))
    patch = {
        "payload": (second + HEADER.size, b"\xee"),
        "crc": (second + 4, b"\x00\x00\x00\x00"),
        "length-huge": (second, b"\x7f\xff\xff\xff"),
        "length-small": (second, struct.pack(">I", 1)),
        "length-zero": (second, struct.pack(">I", 0)),
    }[where]
    damaged = _corrupt(path, *patch)
    mtime = path.stat().st_mtime_ns
    with pytest.raises(CorruptRecordError) as info:
        RecordLog(path)
    assert str(path) in str(info.value)
    assert f"byte {second}" in str(info.value)
    assert path.read_bytes() == damaged
    assert path.stat().st_mtime_ns == mtime


def test_damage_found_while_reading_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "p.log"
    with RecordLog(path) as log:
        log.append(PAYLOADS)
        _corrupt(path, len(frame(PAYLOADS[0])) + HEADER.size, b"\xee")
        with pytest.raises(CorruptRecordError, match="entry 1"):
            list(log.read())


# Reads and threads -------------------------------------------------------------------------------
def test_a_large_log_is_replayed_as_a_stream(tmp_path: Path) -> None:
    """Reading 20 MiB of entries keeps memory to a few buffers, and ``read(n)`` starts at n."""
    path = tmp_path / "big.log"
    payload = bytes(range(256)) * 4
    with RecordLog(path) as log:
        for batch in range(20):
            log.append([payload[:-1] + bytes([batch]) for _ in range(1000)])
    assert path.stat().st_size > 20_000_000
    with RecordLog(path) as log:
        tracemalloc.start()
        try:
            count = 0
            for offset, data in log.read():
                assert offset == count and data[-1] == count // 1000
                count += 1
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert count == 20_000
        assert peak < 4 * 1024 * 1024, f"replay peaked at {peak} bytes"
        first = next(log.read(12_345))
        assert first[0] == 12_345 and first[1][-1] == 12


def test_concurrent_appends_and_reads(tmp_path: Path) -> None:
    path = tmp_path / "p.log"
    log = RecordLog(path)
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(100):
                log.append([f"{n}:{i}".encode()])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader() -> None:
        try:
            for _ in range(20):
                offsets = [o for o, _ in log.read()]
                assert offsets == list(range(len(offsets)))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    got = [p.decode() for _, p in log.read()]
    assert sorted(got) == sorted(f"{n}:{i}" for n in range(8) for i in range(100))
    for n in range(8):
        mine = [int(s.split(":")[1]) for s in got if s.startswith(f"{n}:")]
        assert mine == list(range(100)), "one writer's entries must stay in its order"
    log.close()
    assert _parse(path.read_bytes()) == [s.encode() for s in got]


def test_a_closed_log_refuses_appends_and_reads(tmp_path: Path) -> None:
    log = RecordLog(tmp_path / "p.log")
    log.close()
    log.close()
    with pytest.raises(IllegalStateError):
        log.append([b"x"])
    with pytest.raises(IllegalStateError):
        log.read()
