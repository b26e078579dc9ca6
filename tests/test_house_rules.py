"""House rules that hold themselves: the layering of the packages and the module logger's name.

Read from the sources (every import statement, including those inside functions and under
``TYPE_CHECKING``), not from what happens to be imported at run time, so a lazy import that
breaks a rule is caught too.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "core" / "tierlog"
PLUGIN_SOURCES = sorted([*ROOT.glob("plugins/*/tierlog_*"), *ROOT.glob("examples/*/src/tierlog_*")])

# What a plugin may import from the core: the contracts, the object-store toolkit, the
# conformance suite, Kafka's metadata records, partitioner, cache and topic reader (what an RLMM
# on a Kafka topic is built from), progress reporting, Java properties, and the top-level package
# for ``hookimpl``.
PLUGIN_ALLOWED = (
    "tierlog.spi",
    "tierlog.storage",
    "tierlog.conformance",
    "tierlog.metadata",
    "tierlog.progress",
    "tierlog.properties",
)
PLUGIN_ALLOWED_FROM_TOP = frozenset({"hookimpl", "__version__"})


def _python_files(*roots: Path) -> list[Path]:
    return sorted(p for root in roots for p in root.rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = path.relative_to(CORE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> Iterator[tuple[int, str, tuple[str, ...]]]:
    """(line, absolute module, imported names) of every import statement in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = _module_name(path).rsplit(".", 1)[0] if path.is_relative_to(CORE) else ""
    if path.name == "__init__.py" and path.is_relative_to(CORE):
        package = _module_name(path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                module = ".".join([*base, module] if module else base)
            yield node.lineno, module, tuple(a.name for a in node.names)


def _is_within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_sources_are_found() -> None:
    assert len(_python_files(CORE / "spi")) >= 5
    assert len(PLUGIN_SOURCES) >= 4


@pytest.mark.parametrize("path", _python_files(CORE / "spi"), ids=lambda p: p.name)
def test_spi_is_the_bottom_layer(path: Path) -> None:
    """``tierlog.spi`` imports nothing else of tierlog: every other package builds on it."""
    bad = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for line, module, _ in _imports(path)
        if _is_within(module, "tierlog") and not _is_within(module, "tierlog.spi")
    ]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    "path",
    _python_files(*PLUGIN_SOURCES),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_plugins_depend_only_on_spi_storage_and_conformance(path: Path) -> None:
    bad = []
    for line, module, names in _imports(path):
        if module == "tierlog":
            extra = set(names) - PLUGIN_ALLOWED_FROM_TOP
            if extra or not names:
                bad.append(f"{line}: imports {sorted(extra) or 'tierlog'} from the top level")
        elif _is_within(module, "tierlog") and not any(
            _is_within(module, allowed) for allowed in PLUGIN_ALLOWED
        ):
            bad.append(f"{line}: imports {module}")
    assert not bad, f"{path.relative_to(ROOT)}:\n" + "\n".join(bad)


_LOGGER_ASSIGNMENT = re.compile(r"^(\w+)\s*=\s*logging\.getLogger\((.*)\)\s*$", re.M)


@pytest.mark.parametrize(
    "path",
    [p for p in _python_files(CORE, *PLUGIN_SOURCES) if "getLogger" in p.read_text()],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_one_spelling_of_the_module_logger(path: Path) -> None:
    """A module logger is ``_LOG = logging.getLogger(__name__)``: one name to grep for, and
    the logger hierarchy follows the package hierarchy (so ``tierlog.rlm`` can be tuned)."""
    for name, argument in _LOGGER_ASSIGNMENT.findall(path.read_text()):
        assert (name, argument) == ("_LOG", "__name__"), (
            f"{path.relative_to(ROOT)}: {name} = logging.getLogger({argument})"
        )


def test_the_layering_check_catches_a_violation(tmp_path: Path) -> None:
    """The import walk sees a lazy import inside a function (the check cannot pass vacuously)."""
    source = tmp_path / "mod.py"
    source.write_text("def f():\n    from tierlog.node import Node\n    return Node\n")
    assert [(m, n) for _, m, n in _imports(source)] == [("tierlog.node", ("Node",))]
