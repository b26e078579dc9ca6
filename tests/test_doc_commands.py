"""Every command and code sample of the docs runs, so that a doc cannot drift from the code.

The docs are ``README.md``, ``docs/*.md``, ``plugins/*/README.md`` and ``examples/*/README.md``.
Their fenced blocks are read in order (``tests/_doc_commands.py`` does the reading and running):

- **Shell blocks** (``sh``, ``bash``, ``shell``, ``console``): each command is matched against
  ``RULES``, first match wins, and is run, run in the background as a server, collected only,
  or skipped, each with its reason. A command no rule matches **fails** the test: a new command
  in a doc needs a way to run (most need none: every ``tierlog ...`` command runs as written).
  Commands run with ``bash -o pipefail`` from the repository's root, in document order, with the
  venv's ``bin`` first on ``PATH``; a server started earlier in a document (``tierlog serve``,
  ``scripts/services/run.py``) keeps running until the document is done. Exit status 0 is the
  verdict.
- **Placeholders** of the docs (``HEX``, ``PARTITION_DIR``, ``/tmp/...`` paths, the test
  servers' ports, a node's URL) are replaced by real values from ``PLACEHOLDERS``: fresh
  directories, a partition a ``tierlog.Node`` wrote, free ports. Something that still looks
  like a placeholder after that (a word in capitals, ``...``) fails the command.
- **Python blocks** run as scripts (placeholders replaced), or as a pytest module when the line
  before the fence is ``<!-- doc-test: pytest -->``. A name a block uses without defining it
  (a template's ``MyBackend``) comes from ``PYTHON_NAMES``; any other undefined name fails.
- **Excerpts.** A block of any language preceded by ``<!-- doc-test: excerpt of PATH -->`` must
  be a verbatim excerpt of that file (runs of lines separated by ``...`` or ``# ...`` lines, in
  the file's order); ``<!-- doc-test: file PATH -->``, all of it. The files themselves are
  tested (the example by its own suite, the core by its tests), so the excerpt is too.
- Other blocks are not executed: ``IGNORED_LANGUAGES`` says which, and why; a block in any
  other language fails until it is classified.

The fast tests (not ``slow``) check that every block has a way to run, that the excerpts
match, and that every rule and placeholder is still used; ``test_doc_commands_run`` (``slow``:
several minutes, it runs the conformance suites the docs show against the real servers) runs
them. Every plugin must be installed (``scripts/test`` installs them all): a command that needs
a missing one fails, it is not skipped.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from _doc_commands import (
    CodeBlock,
    Command,
    DocRun,
    Rule,
    check_excerpt,
    code_blocks,
    placeholders_in,
    shell_commands,
    strip_comment,
    substitute,
    undefined_names,
    unresolved,
)

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "scripts") not in sys.path:
    sys.path.insert(0, str(ROOT / "scripts"))

from services._common import free_ports  # noqa: E402

DOCS = sorted(
    [
        Path("README.md"),
        *(p.relative_to(ROOT) for p in ROOT.glob("docs/*.md")),
        *(p.relative_to(ROOT) for p in ROOT.glob("plugins/*/README.md")),
        *(p.relative_to(ROOT) for p in ROOT.glob("examples/*/README.md")),
    ]
)

SHELL_LANGUAGES = frozenset({"sh", "bash", "shell", "console"})
PYTHON_LANGUAGES = frozenset({"python", "py"})
IGNORED_LANGUAGES = {
    "": "no language: program output, diagrams and error messages shown as text",
    "text": "program output shown as text",
    "properties": "configuration for the reader's own machine (their buckets, keys, paths); "
    "the commands that run a node use a configuration that works here",
    "toml": "packaging metadata; a toml block preceded by an excerpt directive is checked",
    "json": "example bodies of HTTP requests and answers (tests/node/test_http_api.py tests "
    "the API itself)",
}

NODE_URL = "http://127.0.0.1:8405"
"""``tierlog serve``'s default URL in the docs: replaced by the URL the node started by the
document announces (it listens on a free port here)."""

RULES: tuple[Rule, ...] = (
    Rule(
        r"pip install ",
        "skip",
        "installs packages into the environment: scripts/test installs the core with its "
        "extras, every plugin and the example into the venv this suite runs in",
    ),
    Rule(
        r"npm ci ",
        "skip",
        "installs Azurite into plugins/rsm_azure/node_modules: scripts/test runs the same "
        "`npm ci` before the suite, and other tests use that Azurite meanwhile",
    ),
    Rule(r"scripts/test$", "skip", "CI's command (.ci/run execs it): it runs this very suite"),
    Rule(
        r"scripts/demo$",
        "skip",
        "sets up a venv and runs `tierlog quickstart` at its default 256 MiB (minutes); the "
        "README's `tierlog quickstart` command runs here at 32 MiB",
    ),
    Rule(
        r"pytest -n \d+ plugins/[\w-]+$",
        "collect",
        "a plugin's whole test suite against its real server, which scripts/test runs; "
        "collecting it checks the path, the options and that every test module imports",
        append="--collect-only -q",
    ),
    Rule(
        r"tierlog serve ",
        "server",
        "a node, until SIGTERM, on a free port (not 8405, which another process may hold): "
        "its URL replaces http://127.0.0.1:8405 and is $TIERLOG_URL for the later commands",
        append="--override tierlog.http.port=0",
        ready=r"^Listening on (?P<url>http://\S+)",
        provides=NODE_URL,
        sets_url=True,
    ),
    Rule(
        r"python scripts/services/run\.py ",
        "server",
        "a test server, until SIGTERM; ready when it prints `ready:`",
        ready=r"^ready: ",
    ),
    Rule(
        r"tierlog metadata migrate ",
        "skip",
        "converts a cluster's metadata topic in place: the docs' broker runs Kafka's own RLMM on "
        "that topic, so it is refused there (exit 2); plugins/rlmm_compacted/tests/"
        "test_migration.py runs it, refusal included, on topics it may convert",
    ),
    Rule(r"tierlog ", "run", "a tierlog command: run as written"),
    Rule(r"pytest examples/", "run", "the example plugin's test suite: a few seconds"),
)


@dataclass(frozen=True)
class Sample:
    """Real files and records for the docs' placeholders."""

    partition_dir: Path
    metadata_hex: str


@dataclass
class Values:
    """What placeholders become in one document's run."""

    tmp: Path
    sample: Sample
    ports: dict[str, int]

    def path(self, name: str) -> str:
        return str(self.tmp / name)

    def port(self, service: str) -> int:
        if service not in self.ports:
            (self.ports[service],) = free_ports(1)
        return self.ports[service]


PLACEHOLDERS: dict[str, Callable[[Values], str]] = {
    # Directories the docs name: fresh ones under the test's temporary directory.
    "/tmp/tierlog-quickstart": lambda v: v.path("quickstart"),
    "/tmp/tierlog-check": lambda v: v.path("check"),
    "/tmp/tierlog": lambda v: v.path("node"),
    "/var/tierlog/remote": lambda v: v.path("remote"),
    "/var/tierlog/metadata": lambda v: v.path("metadata"),
    # A __remote_log_metadata record value (a segment's COPY_SEGMENT_STARTED), in hex.
    "HEX": lambda v: v.sample.metadata_hex,
    # A partition directory a tierlog.Node wrote, and its first segment.
    "PARTITION_DIR": lambda v: str(v.sample.partition_dir),
    "00000000000000000000.log": lambda v: str(v.sample.partition_dir / "00000000000000000000.log"),
    # The test servers the docs start with scripts/services/run.py: free ports instead of the
    # documented ones, which another process may hold.
    "--port 4443": lambda v: f"--port {v.port('fake-gcs')}",
    "http://127.0.0.1:4443": lambda v: f"http://127.0.0.1:{v.port('fake-gcs')}",
    "--port 8333": lambda v: f"--port {v.port('seaweedfs')}",
    "http://127.0.0.1:8333": lambda v: f"http://127.0.0.1:{v.port('seaweedfs')}",
    "--port 9092": lambda v: f"--port {v.port('kafka')}",
    "127.0.0.1:9092": lambda v: f"127.0.0.1:{v.port('kafka')}",
    "/tmp/tierlog-quickstart-topic": lambda v: v.path("quickstart-topic"),
}

DYNAMIC: dict[str, str] = {
    NODE_URL: "the URL of the node `tierlog serve` started earlier in the same document",
}
"""Placeholders whose value a server announces while a document runs (``Rule.provides``)."""

PYTHON_NAMES: dict[str, str] = {
    # docs/writing-a-plugin.md's backend-suite template: tierlog's in-memory backend, on which
    # only the bucket "my-bucket" exists (so the missing-bucket test has a missing bucket); it
    # declares, as the backend-suite doc shows, that it cannot bound its memory.
    "MyBackend": """
import pytest as _pytest

from tierlog.storage.objectstore.backend import null_observer as _null_observer
from tierlog.storage.objectstore.memory import InMemoryBackend as _InMemoryBackend


class MyBackend(_InMemoryBackend):
    def __init__(self, *, bucket, upload, observer=_null_observer):
        super().__init__(upload, observer, bucket=bucket, exists=bucket == "my-bucket")

    @classmethod
    def conformance_capabilities(cls):
        from tierlog.conformance import ObjectStoreBackendCapabilities, Unsupported

        return ObjectStoreBackendCapabilities(
            bounded_memory=Unsupported("an in-memory backend holds every object in memory")
        )


@_pytest.fixture
def my_bucket():
    return "my-bucket"
""",
    # docs/writing-a-plugin.md's RLMM-suite template: the core's own RLMM.
    "MyRLMM": "from tierlog.metadata.embedded import EmbeddedRemoteLogMetadataManager as MyRLMM\n",
}


def rule_for(command: Command) -> Rule | None:
    return next((rule for rule in RULES if rule.matches(command.text)), None)


def python_source(block: CodeBlock, values: dict[str, str] | None = None) -> tuple[str, set[str]]:
    """The program a Python block runs as (the definitions it leaves to the reader first), and
    the names it uses that nobody defines."""
    text = substitute(block.text, values or {})
    names = undefined_names(text)
    given = sorted(names & PYTHON_NAMES.keys())
    prelude = "".join(PYTHON_NAMES[name] for name in given)
    return prelude + "\n" + text + "\n", names - PYTHON_NAMES.keys()


def _directive(block: CodeBlock) -> tuple[str, str]:
    """(kind, argument) of a block's directive: ``("", "")`` when it has none."""
    if block.directive is None:
        return "", ""
    for kind, prefix in (("excerpt", "excerpt of "), ("file", "file ")):
        if block.directive.startswith(prefix):
            return kind, block.directive[len(prefix) :].strip()
    if block.directive == "pytest":
        return "pytest", ""
    return "unknown", block.directive


def problems_of(doc: Path) -> list[str]:
    """Why some block of ``doc`` has no way to be checked (empty: every one has)."""
    problems = []
    for block in code_blocks(ROOT / doc, ROOT):
        kind, argument = _directive(block)
        if kind == "unknown":
            problems.append(f"{block.where()}: unknown directive `doc-test: {argument}`")
            continue
        if block.language in SHELL_LANGUAGES:
            if kind:
                problems.append(f"{block.where()}: shell blocks take no doc-test directive")
            for command in shell_commands(block):
                rule = rule_for(command)
                if rule is None:
                    problems.append(
                        f"{command.where()}: no rule in RULES (tests/test_doc_commands.py) says "
                        f"how to run `{command.text}`: add one, with its reason"
                    )
                    continue
                if rule.action == "skip":
                    continue
                known = {name: name.lower() for name in (*PLACEHOLDERS, *DYNAMIC)}
                left = unresolved(substitute(command.text, known))
                if left:
                    problems.append(
                        f"{command.where()}: `{command.text}` has placeholders with no value: "
                        f"{', '.join(left)} (add them to PLACEHOLDERS, or write a real value)"
                    )
        elif block.language in PYTHON_LANGUAGES and kind in ("", "pytest"):
            try:
                _, missing = python_source(block)
            except SyntaxError as e:
                problems.append(f"{block.where()}: the Python block does not parse: {e}")
                continue
            if missing:
                problems.append(
                    f"{block.where()}: the Python block uses {', '.join(sorted(missing))} without "
                    "defining or importing it: define it, give it in PYTHON_NAMES, or mark the "
                    "block as an excerpt of the file it comes from"
                )
        elif kind in ("excerpt", "file"):
            continue
        elif block.language not in IGNORED_LANGUAGES and block.language not in PYTHON_LANGUAGES:
            problems.append(
                f"{block.where()}: a ```{block.language} block: neither run nor ignored; "
                "add the language to IGNORED_LANGUAGES with a reason, or mark it as an excerpt"
            )
    return problems


def _runnable(doc: Path) -> bool:
    for block in code_blocks(ROOT / doc, ROOT):
        kind, _ = _directive(block)
        if block.language in PYTHON_LANGUAGES and kind in ("", "pytest"):
            return True
        if block.language in SHELL_LANGUAGES and any(
            (rule := rule_for(c)) is not None and rule.action != "skip"
            for c in shell_commands(block)
        ):
            return True
    return False


# Fast checks ----------------------------------------------------------------------------------
def test_the_docs_and_their_commands_are_found() -> None:
    names = {str(d) for d in DOCS}
    assert {
        "README.md",
        "docs/architecture.md",
        "docs/writing-a-plugin.md",
        "plugins/rsm_s3/README.md",
        "plugins/rsm_gcs/README.md",
        "plugins/rsm_azure/README.md",
        "examples/tierlog-example-rsm/README.md",
    } <= names
    commands = [
        c
        for doc in DOCS
        for b in code_blocks(ROOT / doc, ROOT)
        if b.language in SHELL_LANGUAGES
        for c in shell_commands(b)
    ]
    assert len(commands) >= 40
    assert any(c.text.startswith("tierlog serve ") for c in commands)


@pytest.mark.parametrize("doc", DOCS, ids=str)
def test_every_block_has_a_way_to_run(doc: Path) -> None:
    problems = problems_of(doc)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("doc", DOCS, ids=str)
def test_excerpts_are_verbatim(doc: Path) -> None:
    problems = []
    for block in code_blocks(ROOT / doc, ROOT):
        kind, argument = _directive(block)
        if kind in ("excerpt", "file"):
            problem = check_excerpt(block, ROOT / argument, whole=kind == "file")
            if problem:
                problems.append(problem)
    assert not problems, "\n\n".join(problems)


def test_every_rule_placeholder_and_python_name_is_used() -> None:
    """Entries of the tables that no doc needs any more are removed, not kept as dead weight."""
    commands = [
        c
        for doc in DOCS
        for b in code_blocks(ROOT / doc, ROOT)
        if b.language in SHELL_LANGUAGES
        for c in shell_commands(b)
    ]
    unused_rules = [r.pattern for r in RULES if not any(r.matches(c.text) for c in commands)]
    assert not unused_rules, f"rules no command matches: {unused_rules}"
    texts = [c.text for c in commands] + [
        b.text
        for doc in DOCS
        for b in code_blocks(ROOT / doc, ROOT)
        if b.language in PYTHON_LANGUAGES
    ]
    used = set().union(*(placeholders_in(t, [*PLACEHOLDERS, *DYNAMIC]) for t in texts))
    assert not (set(PLACEHOLDERS) | set(DYNAMIC)) - used
    python = [
        b
        for doc in DOCS
        for b in code_blocks(ROOT / doc, ROOT)
        if b.language in PYTHON_LANGUAGES and _directive(b)[0] in ("", "pytest")
    ]
    needed = set().union(*(undefined_names(b.text) for b in python))
    assert not PYTHON_NAMES.keys() - needed


# The checker can fail ---------------------------------------------------------------------------
def _write_doc(tmp_path: Path, text: str) -> Path:
    (tmp_path / "doc.md").write_text(text)
    return tmp_path / "doc.md"


def test_commands_are_split_joined_and_stripped(tmp_path: Path) -> None:
    doc = _write_doc(
        tmp_path,
        "x\n```sh\n# a comment\ntierlog a \\\n    --b c   # why\n\necho '#not' \"a#b\"\n```\n"
        "```console\n$ tierlog plugins\n[output]\n$ tierlog x \\\n  --y\n```\n",
    )
    blocks = code_blocks(doc, tmp_path)
    assert [(c.offset, c.text) for c in shell_commands(blocks[0])] == [
        (1, "tierlog a --b c"),
        (4, "echo '#not' \"a#b\""),
    ]
    assert [c.text for c in shell_commands(blocks[1])] == ["tierlog plugins", "tierlog x --y"]
    assert blocks[1].line == 10
    assert strip_comment("a # b") == "a" and strip_comment("a#b") == "a#b"


def test_placeholders_are_replaced_where_they_stand_alone() -> None:
    values = {"/tmp/tierlog": "T", "/tmp/tierlog-quickstart": "Q", "HEX": "01ab"}
    assert (
        substitute('"/tmp/tierlog" /tmp/tierlog-quickstart/a HEXA HEX x/tmp/tierlog', values)
        == '"T" Q/a HEXA 01ab x/tmp/tierlog'
    )
    assert unresolved("tierlog metadata decode HEX | x") == ["HEX"]
    assert unresolved("A_B=1 tierlog dump 010000...") == ["..."]
    assert unresolved("tierlog --topic-id Bp9TDduJRGa9Q5rlvCJOxg --rsm s3") == []


def test_a_command_without_a_rule_and_an_unknown_language_are_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_doc(tmp_path, "```sh\nmake install\ntierlog dump SOMETHING\n```\n```yaml\na: 1\n```\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    problems = problems_of(Path("doc.md"))
    assert len(problems) == 3, problems
    assert "make install" in problems[0] and "no rule" in problems[0]
    assert "SOMETHING" in problems[1]
    assert "yaml" in problems[2]


def test_an_excerpt_that_drifted_is_reported(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text(
        "class A:\n    def f(self):\n        return 1\n\n    def g(self):\n        pass\n"
    )
    good = "class A:\n    ...\n\n    def g(self):\n        pass"
    drifted = "class A:\n    ...\n    def f(self):\n        return 2"
    out_of_order = "def g(self):\n    pass\n# ...\ndef f(self):\n    return 1"
    block = CodeBlock(Path("doc.md"), 1, "python", good)
    assert check_excerpt(block, source, whole=False) is None
    for text in (drifted, out_of_order):
        bad = CodeBlock(Path("doc.md"), 1, "python", text)
        assert check_excerpt(bad, source, whole=False) is not None
    assert check_excerpt(block, source, whole=True) is not None


def test_a_failing_command_and_a_silent_server_are_failures(tmp_path: Path) -> None:
    block = CodeBlock(Path("doc.md"), 1, "sh", "false\nsleep 60")
    run = DocRun(tmp_path, _command_env(), {})
    false, sleep = shell_commands(block)
    run.run(false, Rule("false", "run", "test"), "false")
    run.run(sleep, Rule("sleep", "server", "test", ready="never", timeout_s=1), "sleep 60")
    run.close()
    assert len(run.failures) == 2
    assert "exited with 1" in run.failures[0] and "not ready" in run.failures[1]


# Running the docs -------------------------------------------------------------------------------
def _command_env() -> dict[str, str]:
    """The environment of the docs' commands: this one without pytest's and tierlog's own
    variables, the venv's ``bin`` first on ``PATH``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_", "TIERLOG_")) and k != "STORAGE_EMULATOR_HOST"
    }
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.fixture(scope="session")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Sample:
    """A partition written by a ``tierlog.Node`` (closed), and a metadata record in hex."""
    import tierlog
    from tierlog.metadata import serde
    from tierlog.spi import (
        RemoteLogSegmentId,
        RemoteLogSegmentMetadata,
        TopicIdPartition,
        Uuid,
    )

    logs = tmp_path_factory.mktemp("doc-sample") / "logs"
    with tierlog.Node({"log.dirs": str(logs)}) as node:
        node.create_topic("events", partitions=1)
        node.produce("events", [b"hello", (b"key", b"value")])
    partition = logs / "events-0"
    assert (partition / "00000000000000000000.log").stat().st_size > 0
    tp = TopicIdPartition(Uuid.from_string("Bp9TDduJRGa9Q5rlvCJOxg"), "events", 0)
    metadata = RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId(tp, Uuid.from_string("x8KfrTcYTm2JyuVVIv5yEg")),
        start_offset=0,
        end_offset=1,
        max_timestamp_ms=1_700_000_000_000,
        broker_id=0,
        event_timestamp_ms=1_700_000_000_000,
        segment_size_in_bytes=(partition / "00000000000000000000.log").stat().st_size,
        segment_leader_epochs={0: 0},
    )
    return Sample(partition, serde.serialize(metadata).hex())


RUNNABLE_DOCS = [doc for doc in DOCS if _runnable(doc)]


@pytest.mark.slow
@pytest.mark.parametrize("doc", RUNNABLE_DOCS, ids=str)
def test_doc_commands_run(doc: Path, tmp_path: Path, sample: Sample) -> None:
    values = Values(tmp_path, sample, {})
    run = DocRun(ROOT, _command_env(), {k: f(values) for k, f in PLACEHOLDERS.items()})
    try:
        for block in code_blocks(ROOT / doc, ROOT):
            kind, _ = _directive(block)
            if block.language in SHELL_LANGUAGES:
                for command in shell_commands(block):
                    rule = rule_for(command)
                    if rule is None or rule.action == "skip":
                        continue  # test_every_block_has_a_way_to_run reports a missing rule
                    text = run.resolve(command, rule, DYNAMIC)
                    if text is not None:
                        run.run(command, rule, text)
            elif block.language in PYTHON_LANGUAGES and kind in ("", "pytest"):
                source, _ = python_source(block, run.values)
                run.run_python(
                    block, source, as_test=kind == "pytest", directory=tmp_path / "python"
                )
    finally:
        run.close()
    print("\n".join(run.log))
    assert not run.failures, "\n\n".join(run.failures)
