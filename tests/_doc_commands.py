"""The machinery of ``test_doc_commands.py``: read the docs' code blocks, split shell blocks into
commands, put real values in place of placeholders, and run commands and Python blocks.

What runs, what is skipped and which values replace which placeholders is decided by the tables
of ``test_doc_commands.py``; nothing here knows a particular doc or command.

- ``code_blocks(path)``: the fenced blocks of a Markdown file, each with its language, the line
  of its first content line and the ``<!-- doc-test: ... -->`` directive on the line before its
  opening fence, if any.
- ``shell_commands(block)``: the commands of a ``sh``/``bash``/``shell`` block (every line that
  is not blank or a comment; ``\\`` continues a line; comments stripped) or of a ``console``
  block (only the lines after a ``$ `` prompt; the other lines are output).
- ``substitute(text, values)``: replaces each placeholder by its value, longest placeholder
  first and only where it stands alone (``/tmp/tierlog`` does not match in
  ``/tmp/tierlog-quickstart``).
- ``DocRun``: one document's commands, run in order from the repository's root, with what they
  leave for the next ones: background servers (stopped, whole process group, at the end) and
  the values they announce (a node's URL).
- ``check_excerpt``: a block shown as an excerpt of a source file must be one, verbatim.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import os
import re
import signal
import subprocess
import textwrap
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*doc-test:\s*(?P<text>.*?)\s*-->\s*$")
_ELISION = re.compile(r"^\s*(\.\.\.|# \.\.\.)\s*$")


@dataclass(frozen=True)
class CodeBlock:
    """A fenced code block of a Markdown file."""

    path: Path
    line: int
    """1-based line number of the block's first content line."""
    language: str
    text: str
    directive: str | None = None
    """The text of a ``<!-- doc-test: ... -->`` comment on the line before the opening fence."""

    def where(self, offset: int = 0) -> str:
        return f"{self.path}:{self.line + offset}"


def code_blocks(path: Path, root: Path) -> list[CodeBlock]:
    """The fenced code blocks of ``path`` (paths in the result are relative to ``root``)."""
    lines = path.read_text().split("\n")
    blocks: list[CodeBlock] = []
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        fence = match["fence"]
        language = (match["info"].strip().split() or [""])[0].lower()
        directive = None
        if i > 0:
            found = _DIRECTIVE.match(lines[i - 1])
            directive = found["text"] if found else None
        start = i + 1
        end = start
        while end < len(lines) and not (
            lines[end].strip().startswith(fence[0] * len(fence))
            and lines[end].strip().strip(fence[0]) == ""
        ):
            end += 1
        blocks.append(
            CodeBlock(
                path=path.relative_to(root),
                line=start + 1,
                language=language,
                text="\n".join(lines[start:end]),
                directive=directive,
            )
        )
        i = end + 1
    return blocks


@dataclass(frozen=True)
class Command:
    """One shell command of a block, comments removed and continuation lines joined."""

    block: CodeBlock
    offset: int
    """Line of the command within its block (0-based)."""
    text: str

    def where(self) -> str:
        return self.block.where(self.offset)


def strip_comment(line: str) -> str:
    """``line`` without a shell comment: a ``#`` that starts a word outside quotes."""
    quote: str | None = None
    escaped = False
    for i, char in enumerate(line):
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def shell_commands(block: CodeBlock) -> list[Command]:
    """The commands of a shell block (see the module's docstring)."""
    commands: list[Command] = []
    console = block.language == "console"
    pending: list[str] = []
    start = 0
    for offset, raw in enumerate(block.text.split("\n")):
        source = raw
        if not pending:
            if console:
                if not raw.startswith("$ "):
                    continue  # output
                source = raw[2:]
            start = offset
        line = strip_comment(source)
        if line.endswith("\\"):
            pending.append(line[:-1].rstrip())
            continue
        pending.append(line)
        text = " ".join(part.strip() for part in pending if part.strip())
        pending = []
        if text:
            commands.append(Command(block, start, text))
    if pending:
        text = " ".join(part.strip() for part in pending if part.strip())
        commands.append(Command(block, start, text))
    return commands


def substitute(text: str, values: Mapping[str, str]) -> str:
    """``text`` with each placeholder of ``values`` replaced where it stands alone: not preceded
    by a letter, digit, ``_``, ``.``, ``/`` or ``-``, and not followed by a letter, digit, ``_``
    or ``-``. Longer placeholders win over their prefixes."""
    if not values:
        return text
    names = sorted(values, key=len, reverse=True)
    pattern = re.compile(r"(?<![\w./-])(" + "|".join(re.escape(n) for n in names) + r")(?![\w-])")
    return pattern.sub(lambda m: values[m.group(1)], text)


def placeholders_in(text: str, names: Iterable[str]) -> set[str]:
    """Which of ``names`` occur in ``text`` as placeholders (the rule of ``substitute``)."""
    found = set()
    for name in names:
        if re.search(r"(?<![\w./-])" + re.escape(name) + r"(?![\w-])", text):
            found.add(name)
    return found


_UNRESOLVED = re.compile(r"(?<![\w=./-])([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*)(?![\w=-])|\.\.\.")


def unresolved(text: str) -> list[str]:
    """What still looks like a placeholder in a command after substitution: a word in capitals
    of three letters or more (``HEX``, ``PARTITION_DIR``) that is not an environment
    assignment, or an elision (``...``)."""
    found = []
    for match in _UNRESOLVED.finditer(text):
        word = match.group(0)
        if word == "..." or len(word) >= 3:
            found.append(word)
    return found


def undefined_names(source: str) -> set[str]:
    """Names a Python block uses without defining or importing them (scopes are not told
    apart: a name bound anywhere in the block counts as defined)."""
    tree = ast.parse(source)
    bound: set[str] = set()
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (used if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return used - bound - set(dir(builtins))


def check_excerpt(block: CodeBlock, source: Path, *, whole: bool) -> str | None:
    """Whether ``block`` is an excerpt of ``source`` (``whole``: all of it), verbatim.

    An excerpt is runs of lines separated by elision lines (``...`` or ``# ...`` alone on a
    line); each run, without its leading and trailing blank lines, must appear in the file as
    consecutive lines, with one indentation added or removed for the whole run, and the runs in
    the file's order. Returns what is wrong, or ``None``.
    """
    if not source.is_file():
        return (
            f"{block.where()}: the block is shown as an excerpt of {source}, which does not exist"
        )
    file_text = source.read_text()
    if whole:
        if block.text.strip("\n") != file_text.strip("\n"):
            return (
                f"{block.where()}: the block is shown as the whole of {source}, but differs "
                "from it: copy the file into the doc again"
            )
        return None
    file_lines = [line.rstrip() for line in file_text.split("\n")]
    runs: list[list[str]] = [[]]
    for line in block.text.split("\n"):
        if _ELISION.match(line):
            runs.append([])
        else:
            runs[-1].append(line.rstrip())
    position = 0
    for run in runs:
        while run and not run[0]:
            run.pop(0)
        while run and not run[-1]:
            run.pop()
        if not run:
            continue
        wanted = textwrap.dedent("\n".join(run)).split("\n")
        found = None
        for i in range(position, len(file_lines) - len(wanted) + 1):
            window = textwrap.dedent("\n".join(file_lines[i : i + len(wanted)])).split("\n")
            if window == wanted:
                found = i
                break
        if found is None:
            return (
                f"{block.where()}: these lines are not in {source} (verbatim, after the part "
                f"matched before them):\n" + "\n".join(run)
            )
        position = found + len(wanted)
    return None


# Running ----------------------------------------------------------------------------------------
Action = Literal["run", "skip", "collect", "server"]


@dataclass(frozen=True)
class Rule:
    """How a command of the docs is checked: the first rule whose ``pattern`` matches the start
    of the command (before placeholders are substituted) applies.

    - ``run``: run it to completion; exit status 0 is the verdict.
    - ``collect``: run it with ``append`` added (``--collect-only``), because the whole of it
      runs elsewhere (``reason``).
    - ``server``: start it in the background and wait until a line of its output matches
      ``ready``; the named group ``url`` of that line then replaces the placeholder ``provides``
      in the document's later commands (and becomes ``$TIERLOG_URL`` when ``sets_url``). It is
      stopped (SIGTERM to its process group) when the document is done.
    - ``skip``: not run, for ``reason``.
    """

    pattern: str
    action: Action
    reason: str
    append: str = ""
    ready: str | None = None
    provides: str | None = None
    sets_url: bool = False
    timeout_s: float = 600.0

    def matches(self, command: str) -> bool:
        return re.match(self.pattern, command) is not None


@dataclass
class _Server:
    where: str
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.rstrip().split("\n")[-lines:])


class DocRun:
    """The commands of one document, run in order from ``cwd`` with what earlier ones left."""

    def __init__(self, cwd: Path, env: Mapping[str, str], values: Mapping[str, str]) -> None:
        self.cwd = cwd
        self.env = dict(env)
        self.values = dict(values)
        self.servers: list[_Server] = []
        self.failures: list[str] = []
        self.log: list[str] = []

    def resolve(self, command: Command, rule: Rule, dynamic: Iterable[str]) -> str | None:
        """The command to run, or ``None`` (a failure recorded) if a placeholder has no value."""
        missing = placeholders_in(command.text, set(dynamic) - set(self.values))
        if missing:
            self.failures.append(
                f"{command.where()}: {command.text}\n  uses {', '.join(sorted(missing))} before "
                "anything earlier in the document provided it (start the server first)"
            )
            return None
        text = substitute(command.text, self.values)
        if rule.append:
            text = f"{text} {rule.append}"
        left = unresolved(text)
        if left:
            self.failures.append(
                f"{command.where()}: {command.text}\n  has placeholders with no value: "
                f"{', '.join(left)} (add them to PLACEHOLDERS in tests/test_doc_commands.py, "
                "or write a real value)"
            )
            return None
        return text

    def run(self, command: Command, rule: Rule, text: str) -> None:
        self.log.append(f"{command.where()}: {rule.action}: {text}")
        if rule.action == "server":
            self._start_server(command, rule, text)
            return
        started = time.monotonic()
        try:
            result = subprocess.run(
                ["bash", "-o", "pipefail", "-c", text],
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=rule.timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as e:
            self.failures.append(
                f"{command.where()}: {text}\n  did not finish within {rule.timeout_s:.0f} s\n"
                f"{_tail(str(e.stdout or ''))}\n{_tail(str(e.stderr or ''))}"
            )
            return
        self.log.append(f"  exit {result.returncode} in {time.monotonic() - started:.1f} s")
        if result.returncode != 0:
            self.failures.append(
                f"{command.where()}: {text}\n  exited with {result.returncode}\n"
                f"  stdout:\n{_tail(result.stdout)}\n  stderr:\n{_tail(result.stderr)}"
            )

    def _start_server(self, command: Command, rule: Rule, text: str) -> None:
        assert rule.ready is not None
        process = subprocess.Popen(
            ["bash", "-c", f"exec {text}"],
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        server = _Server(command.where(), process)
        self.servers.append(server)
        threading.Thread(target=server.pump, daemon=True).start()
        ready = re.compile(rule.ready)
        deadline = time.monotonic() + rule.timeout_s
        while time.monotonic() < deadline:
            for line in list(server.lines):
                match = ready.search(line)
                if match:
                    url = match.groupdict().get("url")
                    if rule.provides and url:
                        self.values[rule.provides] = url
                    if rule.sets_url and url:
                        self.env["TIERLOG_URL"] = url
                    return
            if process.poll() is not None:
                time.sleep(0.2)  # let the pump read the last lines
                self.failures.append(
                    f"{command.where()}: {text}\n  exited with {process.returncode} before it "
                    f"was ready:\n{_tail(chr(10).join(server.lines))}"
                )
                return
            time.sleep(0.1)
        self.failures.append(
            f"{command.where()}: {text}\n  was not ready after {rule.timeout_s:.0f} s:\n"
            f"{_tail(chr(10).join(server.lines))}"
        )

    def run_python(self, block: CodeBlock, source: str, *, as_test: bool, directory: Path) -> None:
        """Run a Python block as a script, or (``as_test``) as a pytest module, in
        ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        name = f"{'test_' if as_test else ''}doc_block_{block.line}.py"
        (directory / name).write_text(source)
        argv = (
            ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", name]
            if as_test
            else ["python", name]
        )
        self.log.append(f"{block.where()}: python{' (pytest)' if as_test else ''}")
        try:
            result = subprocess.run(
                argv,
                cwd=directory,
                env=self.env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
        except subprocess.TimeoutExpired:
            self.failures.append(f"{block.where()}: the Python block did not finish in 600 s")
            return
        if result.returncode != 0:
            self.failures.append(
                f"{block.where()}: the Python block exited with {result.returncode}\n"
                f"  stdout:\n{_tail(result.stdout)}\n  stderr:\n{_tail(result.stderr)}"
            )

    def close(self) -> None:
        for server in reversed(self.servers):
            server.stop()
