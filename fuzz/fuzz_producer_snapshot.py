"""Coverage-guided fuzzing of the producer snapshot parser (``<offset>.snapshot``).

Run (see ``fuzz/README.md``)::

    .venv/bin/python fuzz/fuzz_producer_snapshot.py -atheris_runs=200000 -max_len=1024 [CORPUS]

The first input byte picks how the rest is used (``byte % 3``): ``0`` as the file's bytes;
``1`` as entries behind a valid header (version 1, the count that fits, the CRC of what follows),
so the entry decoding is reached past the CRC; ``2`` the same with the count taken from the
input's first four bytes, so counts that do not match the length get a valid CRC too.

The properties: ``decode_producer_snapshot`` raises nothing but ``TYPED``
(``CorruptSnapshotError``, a ``CorruptRecordError``); what it accepts re-encodes to the same
bytes, and every entry loads into producer state as recovery loads it
(``ProducerStateEntry.from_snapshot_entry``).
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path
from typing import Final

from tierlog.log.crc import crc32c
from tierlog.log.producer_snapshot import (
    PRODUCER_SNAPSHOT_ENTRY_SIZE,
    ProducerSnapshotEntry,
    decode_producer_snapshot,
    encode_producer_snapshot,
)
from tierlog.log.producer_state import ProducerStateEntry
from tierlog.spi import CorruptRecordError

TYPED: Final = (CorruptRecordError,)
"""What the parser may raise on a bad file; anything else is a bug."""

_HEADER: Final = struct.Struct(">hIi")


def seeds() -> list[bytes]:
    """Valid snapshots: empty, a producer with a batch and an open transaction, one without."""
    entries = [
        ProducerSnapshotEntry(7, 2, 11, 4, 1, 1_700_000_000_004, 3, 3),
        ProducerSnapshotEntry(9, 0, -1, -1, 0, 1_700_000_000_000, -1, -1),
        ProducerSnapshotEntry((1 << 63) - 1, -1, (1 << 31) - 1, 0, 5, -1, 0),
    ]
    return [
        b"\x00" + encode_producer_snapshot([]),
        b"\x00" + encode_producer_snapshot(entries),
        b"\x01" + encode_producer_snapshot(entries)[_HEADER.size :],
    ]


def _input(data: bytes) -> bytes:
    if not data:
        return data
    mode, rest = data[0] % 3, data[1:]
    if mode == 0:
        return rest
    if mode == 1:
        count = len(rest) // PRODUCER_SNAPSHOT_ENTRY_SIZE
    else:
        count, rest = int.from_bytes(rest[:4].ljust(4, b"\0"), "big", signed=True), rest[4:]
    body = struct.pack(">i", count) + rest
    return struct.pack(">hI", 1, crc32c(body)) + body


def TestOneInput(data: bytes) -> None:  # noqa: N802 (atheris' name)
    """Decode the input as a snapshot; check what is accepted (see the module doc)."""
    buf = _input(data)
    try:
        entries = decode_producer_snapshot(buf, path="fuzz.snapshot")
    except TYPED:
        return
    assert encode_producer_snapshot(entries) == buf, "an accepted snapshot does not re-encode"
    for entry in entries:
        state = ProducerStateEntry.from_snapshot_entry(entry)
        assert state.producer_id == entry.producer_id


def main(argv: list[str] | None = None) -> None:
    """Fuzz with atheris (libFuzzer's flags in ``argv``); never returns.

    atheris is imported here only (through ``_harness``), so importing this module needs none.
    """
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _harness import fuzz

    fuzz(TestOneInput, argv)


if __name__ == "__main__":
    main()
