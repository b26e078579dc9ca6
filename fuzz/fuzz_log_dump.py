"""Coverage-guided fuzzing of ``tierlog log dump`` over a partition directory.

Run (see ``fuzz/README.md``)::

    .venv/bin/python fuzz/fuzz_log_dump.py -atheris_runs=50000 -max_len=4096 [CORPUS_DIR]

The dump reads every file of a partition, valid or not, and must never end in a traceback. An
input is two bytes and a payload. The first byte picks the options: ``--deep`` (bit 0), ``--json``
(bit 1), then ``bits 2-3 % 3`` none, ``--verify-index`` or ``--index-sanity-check``, and
``--print-data-log`` (bit 4). The second byte (``% 8``) picks what the payload becomes in a
scratch partition directory:

- ``0`` the segment ``00000000000000000000.log``;
- ``1`` edits to a valid segment (``(position hi, position lo, value)`` triples; a leftover byte
  cuts the file), next to the valid segment's own ``.index`` and ``.timeindex``;
- ``2``/``3``/``4`` the ``.index``/``.timeindex``/``.txnindex`` of the valid segment;
- ``5`` a producer snapshot, ``6`` the ``leader-epoch-checkpoint``, ``7`` the
  ``tierlog-offsets-checkpoint``.

The properties (``tierlog.cli._log``'s contract): the exit code is 0 or 1 (2 is for usage
errors, never for a file's content), and it is 1 exactly when a problem is reported: in JSON,
``ok`` is its negation and some file has ``errors`` or ``mismatches``; in text, stderr holds a
line other than a ``tierlog: note:`` (or atheris' ``INFO:``). A broken property raises
``AssertionError``, any other exception escapes: both are crashes for atheris.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Final

from tierlog.cli import main as cli_main
from tierlog.log.batch import ControlRecordType, build_batch, build_control_batch
from tierlog.log.compression import CompressionType
from tierlog.log.indexer import rebuild_indexes
from tierlog.log.offset_index import OffsetIndex
from tierlog.log.reader import iter_batches
from tierlog.log.record import Record
from tierlog.log.time_index import TimeIndex

TYPED: Final = ()
"""The dump reports every error itself: nothing may escape it."""

_LOG: Final = "00000000000000000000.log"
_FILES: Final = (
    _LOG,
    _LOG,
    "00000000000000000000.index",
    "00000000000000000000.timeindex",
    "00000000000000000000.txnindex",
    "00000000000000000007.snapshot",
    "leader-epoch-checkpoint",
    "tierlog-offsets-checkpoint",
)
_scratch: Path | None = None


def _directory() -> Path:
    """A scratch directory for this process, removed at exit."""
    global _scratch
    if _scratch is None:
        _scratch = Path(tempfile.mkdtemp(prefix="tierlog-fuzz-dump-"))
        atexit.register(shutil.rmtree, _scratch, ignore_errors=True)
    return _scratch


def _segment() -> bytes:
    """Batches of every codec, a transactional one, a LogAppendTime one and a COMMIT marker."""
    parts, offset = [], 0
    for i, codec in enumerate(CompressionType):
        recs = [
            Record(offset + j, 1000 * (offset + j), b"k%d" % j, b"v" * (j * 9), (("h", b"x"),))
            for j in range(2 + i)
        ]
        parts.append(
            build_batch(
                recs,
                base_offset=offset,
                compression=codec,
                producer_id=3 if i == 1 else -1,
                producer_epoch=0 if i == 1 else -1,
                base_sequence=0 if i == 1 else -1,
                is_transactional=i == 1,
            )
        )
        offset += len(recs)
    parts.append(
        build_control_batch(
            ControlRecordType.COMMIT,
            1,
            base_offset=offset,
            timestamp=1000 * offset,
            producer_id=3,
            producer_epoch=0,
        )
    )
    return b"".join(parts)


SEGMENT: Final = _segment()


def _indexes() -> tuple[bytes, bytes]:
    """The ``.index`` and ``.timeindex`` recovery builds for ``SEGMENT`` (one entry per batch)."""
    directory = _directory()
    log = directory / _LOG
    log.write_bytes(SEGMENT)
    paths = directory / "seed.index", directory / "seed.timeindex"
    with OffsetIndex(paths[0], 0, 1 << 12) as oi, TimeIndex(paths[1], 0, 1 << 12) as ti:
        rebuild_indexes(
            (
                (p, h.base_offset, h.last_offset, h.max_timestamp, h.size_in_bytes)
                for p, h in iter_batches(log)
            ),
            oi,
            ti,
            0,
        )
    data = paths[0].read_bytes(), paths[1].read_bytes()
    for path in (log, *paths):
        path.unlink()
    return data


INDEX, TIME_INDEX = _indexes()


def seeds() -> list[bytes]:
    """Valid inputs: the whole segment, its indexes, every option combination on them."""
    return [
        *(bytes([flags, 0]) + SEGMENT for flags in range(0, 32, 3)),
        bytes([0b0100, 2]) + INDEX,
        bytes([0b0110, 3]) + TIME_INDEX,
        bytes([0b1000, 1]),
    ]


def _edit(rest: bytes) -> bytes:
    buf = bytearray(SEGMENT)
    for i in range(0, len(rest) - 2, 3):
        buf[((rest[i] << 8) | rest[i + 1]) % len(buf)] = rest[i + 2]
    if len(rest) % 3 == 1:
        del buf[(rest[-1] * 7) % len(buf) :]
    return bytes(buf)


def _layout(directory: Path, layout: int, payload: bytes) -> None:
    """Write the partition directory the second input byte describes."""
    if layout == 0:
        (directory / _LOG).write_bytes(payload)
        return
    (directory / _LOG).write_bytes(_edit(payload) if layout == 1 else SEGMENT)
    if layout == 1:
        (directory / _FILES[2]).write_bytes(INDEX)
        (directory / _FILES[3]).write_bytes(TIME_INDEX)
    else:
        (directory / _FILES[layout]).write_bytes(payload)


def TestOneInput(data: bytes) -> None:  # noqa: N802 (atheris' name)
    """Dump the partition the input describes; check the exit code against the report."""
    if len(data) < 2:
        return
    flags, layout, payload = data[0], data[1] % 8, data[2:]
    argv = ["log", "dump"]
    if flags & 1:
        argv.append("--deep")
    as_json = bool(flags & 2)
    if as_json:
        argv.append("--json")
    argv += [[], ["--verify-index"], ["--index-sanity-check"]][(flags >> 2) % 4 % 3]
    if flags & 16:
        argv.append("--print-data-log")
    directory = _directory() / "topic-0"
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir()
    _layout(directory, layout, payload)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main([*argv, str(directory)])
    assert code in (0, 1), f"exit code {code} for a file's content: {err.getvalue()}"
    if as_json:
        doc = json.loads(out.getvalue())
        assert doc["ok"] is (code == 0), "ok does not match the exit code"
        reported = any(f["errors"] or f.get("mismatches") for f in doc["files"])
    else:
        # atheris' import hook says "INFO: ..." when the dump imports a reader lazily
        reported = any(
            not line.startswith(("tierlog: note: ", "INFO: "))
            for line in err.getvalue().splitlines()
        )
    assert reported is (code == 1), f"exit code {code}, stderr: {err.getvalue()}"


def main(argv: list[str] | None = None) -> None:
    """Fuzz with atheris (libFuzzer's flags in ``argv``); never returns.

    atheris is imported here only (through ``_harness``), so importing this module needs none.
    """
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _harness import fuzz

    fuzz(TestOneInput, argv)


if __name__ == "__main__":
    main()
