"""Documentation stays true: every hook documented and tested, README commands are CI's."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from tierlog.cli import build_parser
from tierlog.spi import hookspecs

ROOT = Path(__file__).resolve().parents[1]
HOOKS = sorted(
    name
    for name, obj in vars(hookspecs).items()
    if name.startswith("tierlog_") and inspect.isfunction(obj)
)


def test_there_are_hooks() -> None:
    assert HOOKS == ["tierlog_register_metadata_managers", "tierlog_register_storage_managers"]


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_has_a_docstring(hook: str) -> None:
    doc = inspect.getdoc(getattr(hookspecs, hook))
    assert doc and "register(" in doc


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_is_in_the_plugin_guide(hook: str) -> None:
    assert hook in (ROOT / "docs" / "writing-a-plugin.md").read_text()


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_is_exercised_by_a_test(hook: str) -> None:
    sources = [
        p.read_text() for p in (ROOT / "tests").rglob("test_*.py") if p.name != "test_docs.py"
    ]
    assert any(hook in s for s in sources)


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "scripts/test " in readme and "scripts/demo " in readme
    assert re.search(r"^exec scripts/test$", (ROOT / ".ci" / "run").read_text(), re.M)


def test_every_cli_command_is_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command")
    for name in commands.choices:  # type: ignore[union-attr]
        assert f"tierlog {name}" in readme, name
