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


# Links ------------------------------------------------------------------------------------------
LINKED_DOCS = sorted(
    [
        ROOT / "README.md",
        *ROOT.glob("docs/*.md"),
        *ROOT.glob("plugins/*/README.md"),
        *ROOT.glob("examples/*/README.md"),
    ]
)
_FENCED = re.compile(r"^ {0,3}(`{3,}|~{3,}).*?^ {0,3}\1[ \t]*$", re.M | re.S)
_INLINE_CODE = re.compile(r"(`+).+?\1", re.S)
_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)", re.M)
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)


def _prose(text: str) -> str:
    """``text`` without code: fenced blocks and inline code spans (links there are not links)."""
    return _INLINE_CODE.sub("", _FENCED.sub("", text))


def _anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of ``path``: lower case, punctuation other than
    ``-`` and ``_`` removed, spaces turned into ``-``, repeats numbered ``-1``, ``-2``..."""
    anchors: set[str] = set()
    for heading in _HEADING.findall(_FENCED.sub("", path.read_text())):
        text = re.sub(r"`([^`]*)`", r"\1", heading)
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
        slug = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")
        candidate, n = slug, 0
        while candidate in anchors:
            n += 1
            candidate = f"{slug}-{n}"
        anchors.add(candidate)
    return anchors


def broken_links(doc: Path, root: Path) -> list[str]:
    """The relative links of ``doc`` whose file (or heading anchor) does not exist in the
    repository at ``root``; links with a scheme (``https:``, ``mailto:``) are not checked."""
    text = _prose(doc.read_text())
    targets = [m.group(1) for m in _LINK.finditer(text)] + _REFERENCE.findall(text)
    problems = []
    for raw in targets:
        target = raw.strip("<>")
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
            continue
        path_part, _, anchor = target.partition("#")
        path_part = path_part.split("?", 1)[0]
        resolved = (doc.parent / path_part).resolve() if path_part else doc.resolve()
        where = f"{doc.relative_to(root)}: ({target})"
        if not resolved.is_relative_to(root.resolve()):
            problems.append(f"{where} points outside the repository")
        elif not resolved.exists():
            problems.append(f"{where}: {resolved.relative_to(root.resolve())} does not exist")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            problems.append(f"{where}: {resolved.name} has no heading with anchor #{anchor}")
    return problems


def test_the_linked_docs_are_found() -> None:
    names = {str(p.relative_to(ROOT)) for p in LINKED_DOCS}
    assert {"README.md", "docs/architecture.md", "plugins/rsm_s3/README.md"} <= names


@pytest.mark.parametrize("doc", LINKED_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_into_the_repository(doc: Path) -> None:
    problems = broken_links(doc, ROOT)
    assert not problems, "\n".join(problems)


def test_a_broken_link_is_reported(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "there.md").write_text("# A title\n\n## Second, part\n")
    doc = tmp_path / "README.md"
    doc.write_text(
        "[ok](docs/there.md) [ok](docs/there.md#second-part) [web](https://example.com)\n"
        "[gone](docs/gone.md) [out](../shared/DESIGN.md) [bad anchor](docs/there.md#third)\n"
        "`[code](not/a/link.md)`\n\n```md\n[block](not/a/link.md)\n```\n[ref]: docs/missing.md\n"
    )
    problems = broken_links(doc, tmp_path)
    assert len(problems) == 4, problems
    assert "docs/gone.md does not exist" in problems[0]
    assert "outside the repository" in problems[1]
    assert "#third" in problems[2]
    assert "docs/missing.md" in problems[3]
