"""``tierlog serve`` as a real process, and the client commands against a running node.

The serve test runs the command as users do (a subprocess with a properties file, port 0, a
``--ready-file``), drives it with the ``produce``/``consume``/``topics`` commands (subprocesses
too), stops it with SIGTERM and starts it again on the same directories. The client commands'
options are then covered in-process against an ``HttpApi`` in the test process, which is faster.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tierlog.cli import main
from tierlog.cli._client_cmds import human_bytes
from tierlog.log.recovery import read_offsets_checkpoint
from tierlog.metadata.partitioner import murmur2
from tierlog.node import Node, NodeConfig
from tierlog.node.client import TierlogClient
from tierlog.node.http_api import HttpApi
from tierlog.spi import IllegalStateError

TIERED_SMALL = {
    "remote.storage.enable": "true",
    "internal.segment.bytes": "600",
    "local.retention.bytes": "1",
}
"""Segments of a few batches, deleted locally as soon as they are copied."""

DEADLINE_S = 60.0
"""How long a test waits for something that takes a second or two on an idle machine."""


def tierlog(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tierlog.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


class Served:
    """A ``tierlog serve`` process; stdout and stderr go to files (a full pipe would block it)."""

    def __init__(self, tmp_path: Path, config: Path, name: str, *extra: str) -> None:
        self.ready = tmp_path / f"{name}.ready"
        self.stdout_path = tmp_path / f"{name}.out"
        self.stderr_path = tmp_path / f"{name}.err"
        with self.stdout_path.open("w") as out, self.stderr_path.open("w") as err:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tierlog.cli",
                    "serve",
                    "--config",
                    str(config),
                    "--ready-file",
                    str(self.ready),
                    *extra,
                ],
                stdout=out,
                stderr=err,
            )
        deadline = time.monotonic() + DEADLINE_S
        while not self.ready.exists():
            if self.proc.poll() is not None:
                pytest.fail(f"tierlog serve exited with {self.proc.returncode}: {self.stderr()}")
            if time.monotonic() > deadline:
                self.proc.kill()
                pytest.fail(f"tierlog serve did not become ready: {self.stderr()}")
            time.sleep(0.05)
        self.url = self.ready.read_text().strip()

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def stdout(self) -> str:
        return self.stdout_path.read_text()

    def stop(self, sig: signal.Signals) -> int:
        """Send ``sig`` and return the exit code; a shutdown that hangs (no exit within the
        generous ``DEADLINE_S``) fails the test, whose output then shows how far it got."""
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"tierlog serve did not exit on {sig.name}: {self.stderr()}")


def write_config(tmp_path: Path, **extra: str) -> Path:
    props = {
        "log.dirs": str(tmp_path / "data"),
        "tierlog.http.port": "0",
        "remote.log.storage.system.enable": "true",
        "num.partitions": "1",
        **extra,
    }
    path = tmp_path / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_serve_produce_consume_stop_and_restart(tmp_path: Path) -> None:
    config = write_config(tmp_path, **{"tierlog.log.format": "json"})
    served = Served(tmp_path, config, "first", "--progress-interval", "0.2")
    try:
        client = TierlogClient(served.url, timeout=DEADLINE_S)
        client.create_topic("events", 1, TIERED_SMALL)
        lines = [f"line-{i:02d}" for i in range(30)]
        # Three requests, three batches: enough for several segments to tier.
        client.produce("events", [v.encode() for v in lines[:10]])
        client.produce("events", [v.encode() for v in lines[10:20]])
        produced = tierlog(
            "produce", "--url", served.url, "--topic", "events",
            stdin="".join(f"{v}\n" for v in lines[20:]),
        )  # fmt: skip
        assert produced.returncode == 0, produced.stderr
        assert produced.stdout == "events-0: offsets 20..29\n"

        (status,) = client.tier("events")
        assert status.local_log_start_offset > 0 and status.remote_segments > 0

        # Offsets below the local log start are read from remote storage by the node.
        consumed = tierlog("consume", "--url", served.url, "--topic", "events", "--from-beginning")
        assert consumed.returncode == 0, consumed.stderr
        assert consumed.stdout.splitlines() == lines

        deadline = time.monotonic() + DEADLINE_S
        while '"message": "progress: events: leo=30' not in served.stderr():
            assert time.monotonic() < deadline, served.stderr()
            time.sleep(0.1)
    finally:
        code = served.stop(signal.SIGTERM)  # fails the test if the shutdown hangs
    assert code == 0, served.stderr()
    assert served.stdout().splitlines()[0] == f"Listening on {served.url}"
    log_lines = [json.loads(line) for line in served.stderr().splitlines()]
    messages = [entry["message"] for entry in log_lines]
    assert f"Listening on {served.url} (metrics at {served.url}/metrics)" in messages
    # The shutdown's steps, in order: the signal acted on, the API closed with no request
    # left waiting, the node closed, then the process's last line.
    stopping = messages.index("Stopping on SIGTERM")
    api_stopped = messages.index("HTTP API stopped")
    node_stopped = messages.index("Node 0 stopped")
    assert stopping < api_stopped < node_stopped < len(messages) - 1
    assert messages[-1] == "Stopped"
    assert not [m for m in messages if "requests in progress" in m]
    checkpoint = read_offsets_checkpoint(tmp_path / "data" / "events-0")
    assert checkpoint is not None and checkpoint.clean_shutdown

    again = Served(tmp_path, config, "second", "--progress-interval", "0")
    try:
        consumed = tierlog("consume", "--url", again.url, "--topic", "events", "--from-beginning")
        assert consumed.returncode == 0, consumed.stderr
        assert consumed.stdout.splitlines() == lines
    finally:
        code = again.stop(signal.SIGINT)
    assert code == 0, again.stderr()
    assert "progress:" not in again.stderr()


def test_serve_config_error_names_the_key(tmp_path: Path) -> None:
    config = write_config(tmp_path, **{"tierlog.http.port": "99999"})
    result = tierlog("serve", "--config", str(config))
    assert result.returncode == 2
    assert "tierlog: error:" in result.stderr and "tierlog.http.port" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "data").exists()  # nothing started


def test_serve_refuses_a_bad_log_setting_and_a_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, **{"tierlog.log.level": "LOUD"})
    assert main(["serve", "--config", str(config)]) == 2
    assert "tierlog.log.level" in capsys.readouterr().err
    config = write_config(tmp_path, **{"tierlog.log.format": "xml"})
    assert main(["serve", "--config", str(config)]) == 2
    assert "tierlog.log.format" in capsys.readouterr().err
    assert main(["serve", "--config", str(tmp_path / "missing.properties")]) == 2
    assert "missing.properties: No such file" in capsys.readouterr().err
    assert main(["serve", "--config", str(config), "--override", "no-equals-sign"]) == 2
    assert "expected key=value" in capsys.readouterr().err


def test_serve_exits_1_when_the_port_is_taken(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = write_config(tmp_path, **{"tierlog.http.port": str(port)})
        result = tierlog("serve", "--config", str(config))
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr


# The client commands, in-process -----------------------------------------------------------------
@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    config = NodeConfig.from_props(
        {
            "log.dirs": str(tmp_path / "data"),
            "remote.log.storage.system.enable": "true",
            "auto.create.topics.enable": "false",
        }
    )
    with Node(config) as node, HttpApi(node) as api:
        yield api.url


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_topics_commands(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "topics", "--url", url, "create", "b", "--partitions", "2")
    assert code == 0 and out.startswith("Created topic b")
    run(capsys, "topics", "create", "a", "--url", url, "--config", "retention.ms=1000")
    code, out, _ = run(capsys, "topics", "--url", url)  # list is the default action
    assert (code, out) == (0, "a\nb\n")
    code, out, _ = run(capsys, "topics", "--url", url, "describe", "b")
    described = json.loads(out)
    assert described["partitions"] == 2 and len(described["status"]) == 2
    code, out, _ = run(capsys, "topics", "--url", url, "describe")
    assert [t["name"] for t in json.loads(out)] == ["a", "b"]
    code, out, _ = run(
        capsys, "topics", "--url", url, "alter", "a",
        "--config", "segment.ms=60000", "--delete-config", "retention.ms",
    )  # fmt: skip
    assert code == 0 and json.loads(out) == {"segment.ms": "60000"}
    code, _, err = run(capsys, "topics", "--url", url, "create", "a")
    assert code == 2 and "already exists" in err
    code, _, err = run(capsys, "topics", "--url", url, "alter", "a")
    assert code == 2 and "nothing to alter" in err
    code, out, _ = run(capsys, "topics", "--url", url, "delete", "a")
    assert (code, out) == (0, "Deleted topic a.\n")
    code, _, err = run(capsys, "topics", "--url", url, "delete", "a")
    assert code == 2 and "does not host this topic: a" in err


def test_produce_and_consume_options(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(capsys, "topics", "--url", url, "create", "t", "--partitions", "3")
    code, out, _ = run(
        capsys, "produce", "--url", url, "--topic", "t", "--partition", "2", "x", "y"
    )
    assert (code, out) == (0, "t-2: offsets 0..1\n")
    source = tmp_path / "values.txt"
    source.write_bytes(b"one\r\ntwo\n\nfour")
    code, out, _ = run(
        capsys, "produce", "--url", url, "--topic", "t", "--key", "key-1",
        "--compression", "gzip", "--from-file", str(source),
    )  # fmt: skip
    keyed_partition = (murmur2(b"key-1") & 0x7FFFFFFF) % 3
    assert keyed_partition != 2  # so that its offsets start at 0
    assert (code, out) == (0, f"t-{keyed_partition}: offsets 0..3\n")

    code, out, _ = run(
        capsys, "consume", "--url", url, "--topic", "t", "--partition", str(keyed_partition),
        "--from-beginning",
    )  # fmt: skip
    assert (code, out) == (0, "one\ntwo\n\nfour\n")
    code, out, _ = run(capsys, "consume", "--url", url, "--topic", "t", "--from-beginning")
    assert sorted(out.splitlines()) == sorted(["x", "y", "one", "two", "", "four"])
    code, out, _ = run(capsys, "consume", "--url", url, "--topic", "t")  # from the end
    assert (code, out) == (0, "")
    code, out, _ = run(
        capsys, "consume", "--url", url, "--topic", "t", "--partition", "2", "--offset", "1",
        "--format", "json",
    )  # fmt: skip
    (record,) = [json.loads(line) for line in out.splitlines()]
    assert {k: record[k] for k in ("topic", "partition", "offset", "key", "value")} == {
        "topic": "t", "partition": 2, "offset": 1, "key": None, "value": "y",
    }  # fmt: skip

    code, _, err = run(capsys, "consume", "--url", url, "--topic", "t", "--offset", "0")
    assert code == 2 and "--offset needs --partition" in err
    code, _, err = run(capsys, "consume", "--url", url, "--topic", "nope")
    assert code == 2 and "nope" in err
    code, _, err = run(capsys, "produce", "--url", url, "--topic", "nope", "v")
    assert code == 2 and "nope" in err


def test_status_command(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "topics", "--url", url, "create", "t", "--partitions", "2")
    run(capsys, "produce", "--url", url, "--topic", "t", "--partition", "1", "a", "b", "c")
    code, out, _ = run(capsys, "status", "--url", url)
    header, *rows = out.splitlines()
    assert code == 0 and header.split()[:5] == [
        "PARTITION", "LOG-START", "LOCAL-START", "LOG-END", "HW",
    ]  # fmt: skip
    assert [row.split()[:5] for row in rows] == [
        ["t-0", "0", "0", "0", "0"],
        ["t-1", "0", "0", "3", "3"],
    ]
    code, out, _ = run(capsys, "status", "--url", url, "--topic", "t", "--json")
    assert [s["log_end_offset"] for s in json.loads(out)] == [0, 3]


def test_status_text_shows_sizes_in_binary_units_and_json_the_bytes(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run(capsys, "topics", "--url", url, "create", "t")
    run(capsys, "produce", "--url", url, "--topic", "t", "x" * 3000)
    code, out, _ = run(capsys, "status", "--url", url, "--json")
    assert code == 0
    (status,) = json.loads(out)
    local_bytes = status["local_bytes"]
    assert 3000 < local_bytes < 4096  # exact bytes in JSON
    code, out, _ = run(capsys, "status", "--url", url)
    assert code == 0
    header, row = (re.split(r"\s{2,}", line) for line in out.splitlines())
    cells = dict(zip(header, row, strict=True))
    assert cells["LOCAL"] == f"1/{local_bytes / 1024:.1f} KiB"
    assert cells["REMOTE"] == "0/0 B"
    assert cells["COPY-LAG"] == "0/0 B"


@pytest.mark.parametrize(
    ("num_bytes", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (3_060_111, "2.9 MiB"),
        (5 * 1024**3 + 1024**3 // 2, "5.5 GiB"),
    ],
)
def test_human_bytes(num_bytes: int, text: str) -> None:
    assert human_bytes(num_bytes) == text


def test_client_commands_report_an_unreachable_node(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("TIERLOG_URL", f"http://127.0.0.1:{port}")
    code, _, err = run(capsys, "status")
    assert code == 2 and f"cannot reach http://127.0.0.1:{port}" in err
    assert os.environ["TIERLOG_URL"].endswith(str(port))


# Unusable log directories ------------------------------------------------------------------------
def serve_with_log_dirs(
    tmp_path: Path, log_dirs: str, *prefix: str
) -> subprocess.CompletedProcess[str]:
    """``tierlog serve`` on ``log_dirs`` (``prefix``: a command the process runs under)."""
    config = write_config(tmp_path, **{"log.dirs": log_dirs})
    return subprocess.run(
        [*prefix, sys.executable, "-m", "tierlog.cli", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("tierlog: error:")]
    assert len(errors) == 1, result.stderr
    for needle in needles:
        assert needle in errors[0]
    assert "Node 0 stopped" not in result.stderr  # it never started
    assert result.stdout == ""  # never listened


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_serve_on_a_log_dir_that_cannot_be_created_is_a_one_line_error(tmp_path: Path) -> None:
    result = serve_with_log_dirs(tmp_path, "/proc/forbidden")
    assert_one_line_error(result, "Cannot create log directory /proc/forbidden (log.dirs): ")


def test_serve_on_a_log_dir_under_a_regular_file_is_a_one_line_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = serve_with_log_dirs(tmp_path, str(blocker / "logs"))
    assert_one_line_error(
        result,
        f"Cannot create log directory {blocker / 'logs'} (log.dirs): Not a directory",
        f"({blocker} is not a directory)",
    )
    assert blocker.read_text() == "not a directory"


def test_serve_on_a_log_dir_without_write_permission_is_a_one_line_error(tmp_path: Path) -> None:
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    read_only.chmod(0o555)
    prefix: tuple[str, ...] = ()
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        # Root writes anywhere through CAP_DAC_OVERRIDE: run serve without it (and without
        # CAP_DAC_READ_SEARCH), so that the permission bits apply as to any other user.
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root and setpriv is not installed to drop CAP_DAC_OVERRIDE")
        prefix = (setpriv, "--bounding-set", "-dac_override,-dac_read_search", "--")
    try:
        result = serve_with_log_dirs(tmp_path, str(read_only), *prefix)
    finally:
        read_only.chmod(0o755)
    assert_one_line_error(
        result, f"Log directory {read_only} (log.dirs) is not writable: Permission denied"
    )
    assert list(read_only.iterdir()) == []  # the write check left nothing behind


def test_serve_without_log_dirs_warns_that_it_uses_kafkas_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The node must not really start on /tmp/kafka-logs (a shared directory of this machine):
    # its start is replaced by one that records the directories it was given and stops there.
    seen: list[tuple[Path, ...]] = []

    def start_nothing(node: Node) -> Node:
        seen.append(node.config.log_dirs)
        raise IllegalStateError("not started by this test")

    monkeypatch.setattr(Node, "start", start_nothing)
    config = tmp_path / "server.properties"
    config.write_text("tierlog.http.port=0\n")
    assert main(["serve", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert seen == [(Path("/tmp/kafka-logs"),)]
    (warning,) = [line for line in err.splitlines() if "WARN" in line]
    assert "Neither log.dirs nor log.dir is set: using Kafka's default /tmp/kafka-logs" in warning
    # With either key set, no warning.
    config.write_text(f"tierlog.http.port=0\nlog.dir={tmp_path / 'data'}\n")
    assert main(["serve", "--config", str(config)]) == 2
    assert seen[-1] == (tmp_path / "data",)
    assert "Neither log.dirs" not in capsys.readouterr().err


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_second_serve_on_the_same_log_dirs_is_refused(tmp_path: Path) -> None:
    # Remote storage off: no embedded RLMM directory lock to stop the second one by chance.
    config = write_config(tmp_path, **{"remote.log.storage.system.enable": "false"})
    first = Served(tmp_path, config, "first", "--progress-interval", "0")
    try:
        second = tierlog("serve", "--config", str(config))
        assert_one_line_error(
            second,
            f"Failed to acquire lock on file .lock in {tmp_path / 'data'}. A tierlog node or "
            "Kafka broker in another process or thread is using this directory.",
        )
        TierlogClient(first.url).create_topic("still-served")
    finally:
        code = first.stop(signal.SIGTERM)
    assert code == 0, first.stderr()
    again = Served(tmp_path, config, "again", "--progress-interval", "0")  # released on exit
    try:
        assert "still-served" in TierlogClient(again.url).topics()
    finally:
        again.stop(signal.SIGTERM)
