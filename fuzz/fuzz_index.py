"""Coverage-guided fuzzing of the index files (``.index``, ``.timeindex``, ``.txnindex``).

Run (see ``fuzz/README.md``)::

    .venv/bin/python fuzz/fuzz_index.py -atheris_runs=200000 -max_len=1024 [CORPUS_DIR]

An input is a file: its first byte picks the kind (``byte % 3``: offset index, time index,
transaction index) and the base offset (``byte // 3 % 3``: 0, 100 or 2^31, past int32: entries
hold offsets relative to it), the rest is the file's content, written to a scratch directory and
opened read-only. Every reader runs over it: iteration, entry access, the sanity check, lookups;
then the file is opened writable and truncated.

The properties: nothing but ``TYPED`` (``CorruptRecordError``, which ``CorruptIndexError`` is)
is raised, and where the sanity check passes, the index behaves as Kafka's: keys strictly
increase, and a lookup is the last entry whose key is <= the target (else Kafka's default
answer). A broken property raises ``AssertionError``, a crash for atheris.
"""

from __future__ import annotations

import atexit
import contextlib
import shutil
import struct
import sys
import tempfile
from pathlib import Path
from typing import Final

from tierlog.log.index import OffsetPosition, TimestampOffset
from tierlog.log.offset_index import OffsetIndex
from tierlog.log.time_index import TimeIndex
from tierlog.log.txn_index import AbortedTxn, TransactionIndex
from tierlog.spi import CorruptRecordError

TYPED: Final = (CorruptRecordError,)
"""What the readers may raise on a bad file; anything else is a bug."""

_KINDS: Final = (".index", ".timeindex", ".txnindex")
_BASES: Final = (0, 100, 1 << 31)
_scratch: Path | None = None


def _directory() -> Path:
    """A scratch directory for this process, removed at exit."""
    global _scratch
    if _scratch is None:
        _scratch = Path(tempfile.mkdtemp(prefix="tierlog-fuzz-index-"))
        atexit.register(shutil.rmtree, _scratch, ignore_errors=True)
    return _scratch


def seeds() -> list[bytes]:
    """Valid files of each kind, as a broker writes them."""
    offsets = b"".join(struct.pack(">ii", n * 3, n * 4096) for n in range(1, 6))
    times = b"".join(struct.pack(">qi", 1_700_000_000_000 + n, n * 3) for n in range(5))
    txns = b"".join(AbortedTxn(7, n * 10, n * 10 + 5, n * 10).to_bytes() for n in range(3))
    return [b"\x00" + offsets, b"\x01" + times, b"\x02" + txns, b"\x03" + offsets]


def _probes(keys: list[int]) -> list[int]:
    """Lookup targets: every key, its neighbours, and the extremes."""
    probes = {-(1 << 63), -1, 0, (1 << 63) - 1}
    for key in keys[:64]:
        probes.update((key - 1, key, key + 1))
    return sorted(probes)


def _middle(entries: list[OffsetPosition] | list[TimestampOffset], base: int) -> int:
    """An offset to truncate at: the middle entry's (the base offset for an empty index)."""
    return entries[len(entries) // 2].offset if entries else base


def _offset_index(path: Path, base: int) -> None:
    with OffsetIndex(path, base, writable=False) as index:
        entries = list(index)
        assert len(entries) == index.entries
        for n in range(min(index.entries, 16)):
            assert index.entry(n) == entries[n]
        try:
            index.sanity_check(segment_size=1 << 20)
        except TYPED:
            sane = False
        else:
            sane = True
            keys = [e.offset for e in entries]
            assert keys == sorted(set(keys)), "sanity check passed, offsets do not increase"
        for target in _probes([e.offset for e in entries]):
            found = index.lookup(target)
            if sane:
                below = [e for e in entries if e.offset <= target]
                assert found == (below[-1] if below else OffsetPosition(base, 0)), target
    _truncate(OffsetIndex, path, base, _middle(entries, base), sane=sane)


def _time_index(path: Path, base: int) -> None:
    with TimeIndex(path, base, writable=False) as index:
        entries = list(index)
        assert len(entries) == index.entries
        for n in range(min(index.entries, 16)):
            assert index.entry(n) == entries[n]
        try:
            index.sanity_check()
        except TYPED:
            sane = False
        else:
            sane = True
            stamps = [e.timestamp for e in entries]
            assert stamps == sorted(set(stamps)), "sanity check passed, timestamps do not increase"
        for target in _probes([e.timestamp for e in entries]):
            found = index.lookup(target)
            if sane:
                below = [e for e in entries if e.timestamp <= target]
                assert found == (below[-1] if below else TimestampOffset(-1, base)), target
    _truncate(TimeIndex, path, base, _middle(entries, base), sane=sane)


def _truncate(
    kind: type[OffsetIndex] | type[TimeIndex], path: Path, base: int, at: int, *, sane: bool
) -> None:
    """Truncate the index at offset ``at``: a sane index keeps only the entries before it.

    Only checked when offsets strictly increase: a sane time index may repeat an offset (Kafka's
    ``maybeAppend`` takes a larger timestamp at the last entry's offset), and then
    ``truncate_to``, like Kafka's ``truncateTo``, can keep an entry at ``at``.
    """
    with kind(path, base, 1 << 16) as index:
        before = list(index)
        index.truncate_to(at)
        after = list(index)
        offsets = [e.offset for e in before]
        if sane and offsets == sorted(set(offsets)):
            assert after == [e for e in before if e.offset < at], at


def _txn_index(path: Path, base: int) -> None:
    with TransactionIndex(base, path, writable=False) as index:
        entries = list(index)
        with contextlib.suppress(*TYPED):
            index.sanity_check()
        for entry in entries[:8]:
            index.collect_aborted_txns(entry.first_offset, entry.last_offset + 1)
        index.collect_aborted_txns(base, (1 << 63) - 1)


_READERS: Final = (_offset_index, _time_index, _txn_index)


def TestOneInput(data: bytes) -> None:  # noqa: N802 (atheris' name)
    """Write the input as an index file and run every reader over it (see the module doc)."""
    if not data:
        return
    kind = data[0] % 3
    base = _BASES[data[0] // 3 % 3]
    path = _directory() / f"{base:020d}{_KINDS[kind]}"
    path.write_bytes(data[1:])
    try:
        with contextlib.suppress(*TYPED):
            _READERS[kind](path, base)
    finally:
        path.unlink()


def main(argv: list[str] | None = None) -> None:
    """Fuzz with atheris (libFuzzer's flags in ``argv``); never returns.

    atheris is imported here only (through ``_harness``), so importing this module needs none.
    """
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _harness import fuzz

    fuzz(TestOneInput, argv)


if __name__ == "__main__":
    main()
