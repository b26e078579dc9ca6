"""Coverage-guided fuzzing of a partition's text checkpoints.

Run (see ``fuzz/README.md``)::

    .venv/bin/python fuzz/fuzz_checkpoint.py -atheris_runs=200000 -max_len=512 [CORPUS_DIR]

The first input byte picks the file and how the rest is used (``byte % 5``):

- ``0`` ``leader-epoch-checkpoint`` bytes as they are, ``1`` the same spelled with only the
  characters such a file holds (digits, sign, space, tab, line breaks), so the parser gets past
  the version and count lines far more often than with random bytes;
- ``2`` ``partition.metadata`` bytes as they are, ``3`` ``version: <n>\\ntopic_id: `` (``n``
  from the next byte: -1, 0 or 1) followed by the rest as base64url text, so the topic id parser
  is reached;
- ``4`` ``tierlog-offsets-checkpoint`` bytes, read by recovery's reader from a scratch directory.

The properties: the parsers raise nothing but ``TYPED`` (``CorruptRecordError``, which
``CorruptCheckpointError`` is); an accepted leader epoch checkpoint or partition metadata
re-encodes to text that parses to the same value; the entries of an accepted leader epoch
checkpoint load into the leader epoch cache, which refuses only a negative epoch or start
offset, with ``InvalidArgumentError``, as Kafka's ``LeaderEpochFileCache.assign`` does.
"""

from __future__ import annotations

import atexit
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Final

from tierlog.log.checkpoint import (
    PartitionMetadata,
    encode_leader_epoch_checkpoint,
    parse_leader_epoch_checkpoint,
    parse_partition_metadata,
)
from tierlog.log.leader_epoch_cache import LeaderEpochFileCache
from tierlog.log.recovery import (
    OffsetsCheckpoint,
    read_offsets_checkpoint,
    write_offsets_checkpoint,
)
from tierlog.spi import CorruptRecordError, InvalidArgumentError, Uuid

TYPED: Final = (CorruptRecordError,)
"""What the parsers may raise on a bad file; anything else is a bug."""

_EPOCH_ALPHABET: Final = b"0123456789-+ \t\n\r"
_BASE64URL: Final = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_="
_scratch: Path | None = None


def _directory() -> Path:
    """A scratch directory for this process, removed at exit."""
    global _scratch
    if _scratch is None:
        _scratch = Path(tempfile.mkdtemp(prefix="tierlog-fuzz-checkpoint-"))
        atexit.register(shutil.rmtree, _scratch, ignore_errors=True)
    return _scratch


def seeds() -> list[bytes]:
    """A valid file of each kind, in the raw modes."""
    epochs = encode_leader_epoch_checkpoint([(0, 0), (1, 100), (5, 2000)])
    metadata = PartitionMetadata(0, Uuid.from_string("vvHDuF6JSwWNWCjk_B3aZw")).encode()
    path = _directory() / "seed"
    path.mkdir(exist_ok=True)
    write_offsets_checkpoint(path, OffsetsCheckpoint(10, 2, 8, True), sync=False)
    offsets = (path / "tierlog-offsets-checkpoint").read_bytes()
    return [
        b"\x00" + epochs,
        b"\x01" + epochs,
        b"\x02" + metadata.encode("ascii"),
        b"\x03\x01" + b"vvHDuF6JSwWNWCjk_B3aZw",
        b"\x04" + offsets,
    ]


def _spell(data: bytes, alphabet: bytes) -> bytes:
    """``data`` with every byte outside ``alphabet`` replaced by one inside (valid text stays)."""
    return bytes(b if b in alphabet else alphabet[b % len(alphabet)] for b in data)


def _leader_epochs(text: bytes) -> None:
    try:
        entries = parse_leader_epoch_checkpoint(text, path="leader-epoch-checkpoint")
    except TYPED:
        return
    assert parse_leader_epoch_checkpoint(encode_leader_epoch_checkpoint(entries)) == entries
    if any(e.epoch < 0 or e.start_offset < 0 for e in entries):
        try:
            LeaderEpochFileCache(entries=entries)
        except InvalidArgumentError:
            return
        raise AssertionError("the leader epoch cache took a negative epoch or offset")
    cache = LeaderEpochFileCache(entries=entries)
    for entry in entries[:16]:
        cache.epoch_for_offset(entry.start_offset)
        cache.end_offset_for(entry.epoch, (1 << 63) - 1)


def _partition_metadata(text: bytes) -> None:
    try:
        metadata = parse_partition_metadata(text, path="partition.metadata")
    except TYPED:
        return
    assert parse_partition_metadata(metadata.encode()) == metadata


def _offsets_checkpoint(content: bytes) -> None:
    directory = _directory()
    path = directory / "tierlog-offsets-checkpoint"
    path.write_bytes(content)
    try:
        read_offsets_checkpoint(directory)
    except TYPED:
        pass
    finally:
        path.unlink()


def TestOneInput(data: bytes) -> None:  # noqa: N802 (atheris' name)
    """Parse the input as the checkpoint its first byte names (see the module doc)."""
    if not data:
        return
    mode, rest = data[0] % 5, data[1:]
    if mode == 0:
        _leader_epochs(rest)
    elif mode == 1:
        _leader_epochs(_spell(rest, _EPOCH_ALPHABET))
    elif mode == 2:
        _partition_metadata(rest)
    elif mode == 3:
        version = str(rest[0] % 3 - 1 if rest else 0).encode()  # -1 (refused), 0 or 1
        topic_id = _spell(rest[1:], _BASE64URL)
        _partition_metadata(b"version: " + version + b"\ntopic_id: " + topic_id)
    else:
        _offsets_checkpoint(rest)


def main(argv: list[str] | None = None) -> None:
    """Fuzz with atheris (libFuzzer's flags in ``argv``); never returns.

    atheris is imported here only (through ``_harness``), so importing this module needs none.
    """
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _harness import fuzz

    fuzz(TestOneInput, argv)


if __name__ == "__main__":
    main()
