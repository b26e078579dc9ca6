"""Coverage-guided fuzzing of tierlog's record batch parsers with atheris.

Run (see ``fuzz/README.md``)::

    .venv/bin/python fuzz/fuzz_record_batch.py -atheris_runs=200000 -max_len=4096 [CORPUS_DIR]

The property: over any bytes, shallow and deep iteration (with and without CRC checks), the
single-batch decoder and the control-record decoder raise nothing but ``TYPED``
(``CorruptRecordError``, or ``UnsupportedRecordFormatError`` for a legacy magic 0/1 batch). The
first input byte picks how the rest is used: ``0`` as is (``b"\\x00" + segment bytes`` is a
segment), ``1`` behind a plausible header (magic 2, a fitting length, so the record decoder is
reached), ``2`` as edits to a valid segment holding every codec and a control batch (so the
decompressors are reached). A crash is an uncaught exception; atheris writes the input to
``crash-*``.

atheris is imported only by ``main``: ``tests/log/test_fuzz_targets.py`` runs ``TestOneInput``
over a corpus without it.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Final

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

TYPED: Final = (CorruptRecordError, UnsupportedRecordFormatError)
"""What the parsers may raise on bad input; anything else is a bug."""

_MAX_DECOMPRESSED: Final = 1 << 20


def _batches() -> list[bytes]:
    """One batch per codec (headers, null keys, several records) and a COMMIT marker."""
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
            for j in range(3 + i)
        ]
        parts.append(build_batch(recs, base_offset=offset, compression=codec))
        offset += len(recs)
    parts.append(
        build_control_batch(
            ControlRecordType.COMMIT,
            1,
            base_offset=offset,
            timestamp=5,
            producer_id=3,
            producer_epoch=0,
        )
    )
    return parts


SEGMENT: Final = b"".join(_batches())


def seeds() -> list[bytes]:
    """Valid inputs (raw mode): the whole segment and each of its batches alone."""
    return [b"\x00" + SEGMENT, *(b"\x00" + batch for batch in _batches())]


def _input(data: bytes) -> bytes:
    if not data:
        return data
    mode, rest = data[0] % 3, data[1:]
    if mode == 0:
        return rest
    if mode == 1:
        buf = bytearray(rest.ljust(61, b"\0"))
        buf[8:12] = (len(buf) - 12).to_bytes(4, "big")
        buf[16] = 2
        buf[21] &= 0x07
        return bytes(buf)
    buf = bytearray(SEGMENT)
    for i in range(0, len(rest) - 2, 3):  # (position hi, position lo, value) triples
        at = ((rest[i] << 8) | rest[i + 1]) % len(buf)
        buf[at] = rest[i + 2]
    if len(rest) % 3 == 1:
        del buf[(rest[-1] * 7) % len(buf) :]
    return bytes(buf)


def TestOneInput(data: bytes) -> None:  # noqa: N802 (atheris' name)
    """Run every batch parser over the input; only ``TYPED`` errors are expected (and ignored)."""
    buf = _input(data)
    for verify in (True, False):
        with contextlib.suppress(*TYPED):
            for _ in iter_batches(buf, verify_crc=verify):
                pass
        with contextlib.suppress(*TYPED):
            for _, header, records in iter_batches_with_records(
                buf, verify_crc=verify, max_decompressed_size=_MAX_DECOMPRESSED
            ):
                if header.is_control:
                    for record in records:
                        with contextlib.suppress(CorruptRecordError):
                            decode_control_record(record)
    with contextlib.suppress(*TYPED):
        decode_batch(buf, verify=False, max_decompressed_size=_MAX_DECOMPRESSED)


def main(argv: list[str] | None = None) -> None:
    """Fuzz with atheris (libFuzzer's flags in ``argv``); never returns.

    atheris is imported here only (through ``_harness``), so importing this module needs none.
    """
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _harness import fuzz

    fuzz(TestOneInput, argv)


if __name__ == "__main__":
    main()
