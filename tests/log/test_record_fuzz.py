"""Fuzzing the batch parsers: random bytes and mutated valid segments only ever raise the two
typed errors (``CorruptRecordError``, or ``UnsupportedRecordFormatError`` for magic 0/1).

The same targets run under atheris in ``fuzz/fuzz_record_batch.py``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierlog.log.batch import (
    ControlRecordType,
    UnsupportedRecordFormatError,
    build_batch,
    build_control_batch,
    decode_batch,
    decode_control_record,
)
from tierlog.log.compression import CompressionType
from tierlog.log.reader import iter_batches, iter_batches_with_records
from tierlog.log.record import Record
from tierlog.spi import CorruptRecordError

TYPED = (CorruptRecordError, UnsupportedRecordFormatError)


def _segment() -> bytes:
    parts, offset = [], 0
    for i, codec in enumerate(CompressionType):
        recs = [
            Record(
                offset + j,
                1000 * j,
                b"k%d" % j if j % 2 else None,
                b"v" * (j * 7),
                (("h", b"x"),) if j % 3 == 0 else (),
            )
            for j in range(4 + i)
        ]
        parts.append(
            build_batch(
                recs,
                base_offset=offset,
                compression=codec,
                is_transactional=i % 2 == 1,
                producer_id=3,
            )
        )
        offset += len(recs)
    parts.append(
        build_control_batch(
            ControlRecordType.ABORT,
            1,
            base_offset=offset,
            timestamp=5,
            producer_id=3,
            producer_epoch=0,
        )
    )
    return b"".join(parts)


SEGMENT = _segment()


def exercise(data: bytes) -> None:
    """Every parser entry point over ``data``; anything but the typed errors fails the test."""
    for verify in (True, False):
        try:
            for _ in iter_batches(data, verify_crc=verify):
                pass
        except TYPED:
            pass
        try:
            for _, header, records in iter_batches_with_records(
                data, verify_crc=verify, max_decompressed_size=1 << 20
            ):
                if header.is_control:
                    for record in records:
                        with contextlib.suppress(CorruptRecordError):
                            decode_control_record(record)
        except TYPED:
            pass
    with contextlib.suppress(TYPED):
        decode_batch(data, verify=False, max_decompressed_size=1 << 20)


@given(st.binary(max_size=512))
@settings(max_examples=300, deadline=None)
def test_random_bytes(data: bytes) -> None:
    exercise(data)


@given(st.binary(min_size=61, max_size=400))
@settings(max_examples=300, deadline=None)
def test_random_bytes_behind_a_plausible_header(data: bytes) -> None:
    # magic 2 and a length that fits, so the fuzzer reaches the record decoder
    buf = bytearray(data)
    buf[8:12] = (len(buf) - 12).to_bytes(4, "big")
    buf[16] = 2
    buf[21] &= 0x07  # any codec
    exercise(bytes(buf))


@st.composite
def mutations(draw: st.DrawFn) -> bytes:
    buf = bytearray(SEGMENT)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "set", "cut", "insert", "delete"]))
        at = draw(st.integers(0, max(len(buf) - 1, 0)))
        if kind == "flip" and buf:
            buf[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and buf:
            buf[at] = draw(st.integers(0, 255))
        elif kind == "cut":
            del buf[at:]
        elif kind == "insert":
            buf[at:at] = draw(st.binary(min_size=1, max_size=8))
        else:
            del buf[at : at + draw(st.integers(1, 8))]
    return bytes(buf)


@given(mutations())
@settings(max_examples=400, deadline=None)
def test_mutated_segments(data: bytes) -> None:
    exercise(data)


@given(mutations())
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_mutated_segment_files(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "fuzz.log"
    path.write_bytes(data)
    for buffer_size in (64, 4096):
        try:
            for _ in iter_batches_with_records(path, verify_crc=False, buffer_size=buffer_size):
                pass
        except CorruptRecordError as e:
            assert e.path == str(path) and e.position is not None
            assert 0 <= e.position <= len(data)
        except UnsupportedRecordFormatError as e:
            assert e.path == str(path)


@pytest.mark.slow
@given(mutations())
@settings(max_examples=5000, deadline=None)
def test_mutated_segments_long(data: bytes) -> None:
    exercise(data)


def test_the_fuzz_corpus_seed_is_valid() -> None:
    assert sum(len(rs) for _, _, rs in iter_batches_with_records(SEGMENT)) == 4 + 5 + 6 + 7 + 8 + 1
    exercise(SEGMENT)
    exercise(os.urandom(1000))
