"""The atheris fuzz targets under ``fuzz/``, run as ordinary tests.

Every target's ``TestOneInput`` must return normally on any input: its parsers may raise only
the target's ``TYPED`` errors (which it swallows), and its properties must hold. Here each
target runs without atheris over a corpus: its valid seeds, tierlog-built record batches (for
the batch target), every truncation and a spread of bit flips of those, and hypothesis' random
and mutated inputs. The tests also make sure a target cannot pass vacuously: its seeds reach its
parsers and are accepted, and an untyped exception raised inside a parser escapes the target.
With atheris installed, a ``slow`` test runs each target under atheris for a few seconds.
"""

from __future__ import annotations

import contextlib
import importlib.util
import subprocess
import sys
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierlog.log.batch import (
    ControlRecordType,
    UnsupportedRecordFormatError,
    build_batch,
    build_control_batch,
)
from tierlog.log.compression import CompressionType
from tierlog.log.record import Record
from tierlog.spi import CorruptRecordError

FUZZ_DIR = Path(__file__).resolve().parents[2] / "fuzz"
TARGETS = (
    "fuzz_checkpoint",
    "fuzz_index",
    "fuzz_log_dump",
    "fuzz_producer_snapshot",
    "fuzz_record_batch",
)

# The parsers (module attributes) each target must reach on its seeds, and that must accept them.
PARSERS: dict[str, tuple[str, ...]] = {
    "fuzz_checkpoint": (
        "parse_leader_epoch_checkpoint",
        "parse_partition_metadata",
        "read_offsets_checkpoint",
    ),
    "fuzz_index": ("OffsetIndex", "TimeIndex", "TransactionIndex"),
    "fuzz_log_dump": ("cli_main",),
    "fuzz_producer_snapshot": ("decode_producer_snapshot",),
    "fuzz_record_batch": ("iter_batches", "iter_batches_with_records", "decode_batch"),
}


class _NoAtheris:
    """A meta path finder that makes ``import atheris`` fail, as on a machine without it."""

    def find_spec(self, name: str, *args: object) -> None:
        if name == "atheris" or name.startswith("atheris."):
            raise ModuleNotFoundError("No module named 'atheris' (hidden by the test)")
        return None


@contextlib.contextmanager
def atheris_hidden() -> Iterator[None]:
    """Inside the block ``import atheris`` fails, even where atheris is installed."""
    saved = {k: v for k, v in sys.modules.items() if k == "atheris" or k.startswith("atheris.")}
    for key in saved:
        del sys.modules[key]
    finder = _NoAtheris()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        sys.modules.update(saved)


@cache
def load(name: str) -> ModuleType:
    """Import ``fuzz/<name>.py`` with atheris unimportable (cached per process)."""
    path = FUZZ_DIR / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_fuzz_target_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    with atheris_hidden():
        spec.loader.exec_module(module)
    assert "atheris" not in vars(module), f"{name} imported atheris at module level"
    return module


def record_batches() -> list[bytes]:
    """Valid batches written with ``build_batch``: every codec, transactional, control."""
    batches = [
        build_batch(
            [Record(i, 1000 + i, b"k%d" % i if i % 2 else None, b"v" * i) for i in range(n + 1)],
            compression=codec,
            producer_id=4 if n % 2 else -1,
            producer_epoch=0 if n % 2 else -1,
            base_sequence=0 if n % 2 else -1,
            is_transactional=n % 2 == 1,
        )
        for n, codec in enumerate(CompressionType)
    ]
    batches.append(
        build_control_batch(
            ControlRecordType.ABORT, 2, timestamp=9, producer_id=4, producer_epoch=0
        )
    )
    return batches


def corpus(name: str) -> list[bytes]:
    """Seeds (and for the batch target tierlog-built batches, raw mode), and their damage.

    Seeds that differ only in their first byte (the dump's options) are damaged once, the
    damaged copies taking their first bytes in turn.
    """
    module = load(name)
    valid: list[bytes] = list(module.seeds())
    if name == "fuzz_record_batch":
        valid += [b"\x00" + batch for batch in record_batches()]
    heads: dict[bytes, list[int]] = {}
    for seed in valid:
        heads.setdefault(seed[1:], []).append(seed[0])
    inputs = list(valid)
    for payload, firsts in heads.items():
        seed = bytes(firsts[:1]) + payload
        damaged = [seed[:n] for n in range(1, len(seed), max(1, len(seed) // 24))]  # truncations
        for n in range(1, len(seed), max(1, len(seed) // 16)):  # bit flips after the mode byte
            for bit in (0, 7):
                flipped = bytearray(seed)
                flipped[n] ^= 1 << bit
                damaged.append(bytes(flipped))
        inputs += [bytes([firsts[i % len(firsts)]]) + d[1:] for i, d in enumerate(damaged)]
    return inputs


def _spy(function: Any, seen: list[BaseException | None]) -> Callable[..., Any]:
    """``function``, recording each call's outcome (an exception, or ``None``); an iterator it
    returns is followed to its end, since iterators raise while being consumed."""

    def spy(*args: Any, **kwargs: Any) -> Any:
        try:
            result = function(*args, **kwargs)
        except BaseException as exc:
            seen.append(exc)
            raise
        if isinstance(result, Iterator):
            return _follow(result, seen)
        if type(result) is int and result != 0:  # the dump's exit code
            seen.append(RuntimeError(f"exit code {result}"))
        else:
            seen.append(None)
        return result

    return spy


def _follow(iterator: Iterator[Any], seen: list[BaseException | None]) -> Iterator[Any]:
    try:
        yield from iterator
    except BaseException as exc:
        seen.append(exc)
        raise
    seen.append(None)


def _raiser(error: BaseException) -> Callable[..., Any]:
    def raiser(*args: Any, **kwargs: Any) -> Any:
        raise error

    return raiser


def test_the_fuzz_directory_holds_the_documented_targets() -> None:
    assert tuple(sorted(p.stem for p in FUZZ_DIR.glob("fuzz_*.py"))) == TARGETS
    readme = (FUZZ_DIR / "README.md").read_text()
    for name in TARGETS:
        assert f"`{name}.py`" in readme


@pytest.mark.parametrize("name", TARGETS)
def test_a_target_imports_without_atheris_and_has_the_harness(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # main() puts fuzz/ on it
    module = load(name)
    assert callable(module.TestOneInput) and callable(module.main)
    assert isinstance(module.TYPED, tuple)
    assert all(issubclass(t, Exception) and t is not Exception for t in module.TYPED)
    assert module.seeds(), "a target needs valid seeds"
    with pytest.raises(ModuleNotFoundError), atheris_hidden():
        module.main(["fuzz"])  # the only place atheris is imported


def test_typed_errors_are_the_documented_ones() -> None:
    """The parsers' contract: corrupt input is ``CorruptRecordError`` (and a legacy batch
    ``UnsupportedRecordFormatError``); the dump reports everything itself."""
    assert {name: load(name).TYPED for name in TARGETS} == {
        "fuzz_checkpoint": (CorruptRecordError,),
        "fuzz_index": (CorruptRecordError,),
        "fuzz_log_dump": (),
        "fuzz_producer_snapshot": (CorruptRecordError,),
        "fuzz_record_batch": (CorruptRecordError, UnsupportedRecordFormatError),
    }


@pytest.mark.parametrize("name", TARGETS)
def test_corpus_of_valid_truncated_and_bit_flipped_inputs(name: str) -> None:
    module = load(name)
    inputs = corpus(name)
    assert len(inputs) > 20
    for data in inputs:
        module.TestOneInput(data)  # raises on an untyped error or a broken property


@pytest.mark.parametrize("name", TARGETS)
def test_seeds_reach_the_parsers_and_are_accepted(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = load(name)
    outcomes: dict[str, list[BaseException | None]] = {}
    for attr in PARSERS[name]:
        outcomes[attr] = []
        monkeypatch.setattr(module, attr, _spy(getattr(module, attr), outcomes[attr]))
    for seed in module.seeds():
        module.TestOneInput(seed)
    for attr, seen in outcomes.items():
        assert seen, f"{name}: the seeds never reach {attr}"
        errors = [e for e in seen if e is not None]
        assert not errors, f"{name}: {attr} refused a seed: {errors[0]!r}"


@pytest.mark.parametrize("name", TARGETS)
def test_an_untyped_error_in_a_parser_escapes_and_a_typed_one_does_not(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A target that swallowed every exception, or never called its parser, would pass every
    other test; it must not pass this one."""
    module = load(name)
    for attr in PARSERS[name]:
        with monkeypatch.context() as patch:
            patch.setattr(module, attr, _raiser(RuntimeError(f"bug in {attr}")))
            with pytest.raises(RuntimeError, match=f"bug in {attr}"):
                for seed in module.seeds():
                    module.TestOneInput(seed)
        if module.TYPED:
            with monkeypatch.context() as patch:
                patch.setattr(module, attr, _raiser(module.TYPED[0]("bad input")))
                for seed in module.seeds():
                    module.TestOneInput(seed)


@pytest.mark.parametrize("name", TARGETS)
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(data=st.data())
def test_hypothesis_inputs(name: str, data: st.DataObject) -> None:
    module = load(name)
    seeds = module.seeds()
    kind = data.draw(st.sampled_from(["random", "mutated"]))
    if kind == "random":
        head = data.draw(st.integers(0, 255))
        raw = bytes([head]) + data.draw(st.binary(max_size=512))
    else:
        buf = bytearray(data.draw(st.sampled_from(seeds)))
        edits = data.draw(
            st.lists(st.tuples(st.integers(0, len(buf) - 1), st.integers(0, 255)), max_size=8)
        )
        for at, value in edits:
            buf[at] = value
        cut = data.draw(st.integers(0, len(buf)))
        raw = bytes(buf[:cut]) if data.draw(st.booleans()) else bytes(buf)
    module.TestOneInput(raw)


@pytest.mark.slow
@pytest.mark.parametrize("name", TARGETS)
def test_real_atheris_run(name: str, tmp_path: Path) -> None:
    """A few seconds of coverage-guided fuzzing from the seeds: no crash, no failed property."""
    if importlib.util.find_spec("atheris") is None:
        pytest.skip("atheris is not installed (pip install atheris; Linux x86-64 wheels)")
    seed_dir = tmp_path / "corpus"
    seed_dir.mkdir()
    for n, seed in enumerate(load(name).seeds()):
        (seed_dir / f"seed-{n}").write_bytes(seed)
    result = subprocess.run(
        [
            sys.executable,
            str(FUZZ_DIR / f"{name}.py"),
            "-max_total_time=5",
            "-max_len=2048",
            f"-artifact_prefix={tmp_path}/",
            str(seed_dir),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,
    )
    crashes = sorted(p.name for p in tmp_path.glob("crash-*"))
    assert result.returncode == 0 and not crashes, result.stderr[-4000:]
    assert "Done " in result.stderr  # libFuzzer's summary: the run really happened
