"""``tierlog conformance``: the plugin and its configuration are checked once, before pytest.

A wrong plugin name, a plugin of the other kind, or a configuration the plugin refuses ends the
command with one message and exit code 2 instead of the same error in every test; ``--config``
adjusts the plugin's own ``conformance_config()`` instead of replacing it, and says which keys it
replaced. The runs that need pytest go through a subprocess, as a user runs the command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tierlog.cli import main
from tierlog.conformance._base import resolve_plugin_class
from tierlog.spi import PluginError

RECORDING_RSM = """
import json
import os

from tierlog.storage.local import LocalTieredStorage


class Recording(LocalTieredStorage):
    '''Writes every configuration it is given, one JSON object a line, to $RECORD_TO.'''

    @classmethod
    def conformance_config(cls):
        return {**super().conformance_config(), "node.id": "1", "delete.enable": "true"}

    def configure(self, configs):
        with open(os.environ["RECORD_TO"], "a") as record:
            record.write(json.dumps(dict(configs)) + "\\n")
        super().configure(configs)


class BuggyConfigure(LocalTieredStorage):
    def configure(self, configs):
        raise KeyError("dir")
"""


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _conformance(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tierlog.cli", "conformance", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
        check=False,
        env={**os.environ, "PYTHONPATH": str(cwd), **(env or {})},
    )


def _one_error_line(err: str) -> str:
    """The single line of a refused run's stderr, checked to be an error, not a traceback."""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("tierlog: error: ") and "Traceback" not in err
    return lines[0]


# A configuration the plugin refuses ---------------------------------------------------------
def test_a_refused_configuration_is_one_message_before_any_test(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The plugin's own ConfigError text, once; pytest never starts (nothing on stdout). The
    plugin's ``dir`` still comes from its ``conformance_config()``: only the bad key is given."""
    code, out, err = run_cli(
        capsys,
        "conformance",
        "--rsm",
        "local",
        "--config",
        "delete.enable=maybe",
    )
    assert (code, out) == (2, "")
    line = _one_error_line(err)
    assert line.startswith("tierlog: error: rsm 'local' refused its configuration: ")
    assert "delete.enable" in line and "maybe" in line, "the plugin's text names key and value"


def test_a_refused_override_is_reported_with_the_key_it_replaced(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run_cli(capsys, "conformance", "--rsm", "local", "--config", "dir=")
    assert (code, out) == (2, "")
    notice, error = err.splitlines()
    assert notice == (
        "tierlog conformance: --config overrides dir of LocalTieredStorage.conformance_config()"
    )
    assert error.startswith(
        "tierlog: error: rsm 'local' refused its configuration: dir is required"
    )


def test_an_rlmm_configuration_is_checked_too(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")
    code, _, err = run_cli(
        capsys, "conformance", "--rlmm", "embedded", "--config", f"dir={not_a_directory}"
    )
    assert code == 2
    assert "rlmm 'embedded' refused its configuration: " in err.splitlines()[-1]


def test_a_configure_that_crashes_is_one_message_too(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plugin bug (not a ConfigError) is still one line, naming the exception."""
    (tmp_path / "recording_rsm.py").write_text(RECORDING_RSM)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "conformance", "--rsm", "recording_rsm:BuggyConfigure")
    assert code == 2 and out == ""
    line = _one_error_line(err)
    assert "failed to configure: KeyError: 'dir'" in line and "ConfigError" in line


# --config on top of the plugin's configuration ------------------------------------------------
def test_config_is_merged_over_the_plugin_configuration(tmp_path: Path) -> None:
    """The check before pytest and every test get the plugin's keys with --config's on top,
    and stderr names, in one line, the keys --config replaced (not those it adds)."""
    (tmp_path / "recording_rsm.py").write_text(RECORDING_RSM)
    record = tmp_path / "configs.jsonl"
    result = _conformance(
        "--rsm",
        "recording_rsm:Recording",
        "--config",
        "node.id=9",
        "--config",
        "added.key=x",
        "--",
        "-q",
        "-k",
        "test_fetch_segment_returns_copied_bytes or test_delete_twice_succeeds",
        cwd=tmp_path,
        env={"RECORD_TO": str(record)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert " passed" in result.stdout
    overrides = [line for line in result.stderr.splitlines() if "--config overrides" in line]
    assert overrides == [
        "tierlog conformance: --config overrides node.id of Recording.conformance_config()"
    ]
    configs = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(configs) == 3, "the check before pytest, then each of the two tests"
    for config in configs:
        assert set(config) == {"dir", "node.id", "delete.enable", "added.key"}
        assert (config["node.id"], config["delete.enable"], config["added.key"]) == (
            "9",
            "true",
            "x",
        )
    assert len({config["dir"] for config in configs}) == len(configs), (
        "the plugin's conformance_config() still makes a fresh directory for each test"
    )


def test_keys_only_added_are_not_reported(tmp_path: Path) -> None:
    result = _conformance(
        "--rsm", "local", "--config", "added.key=x", "--", "--collect-only", "-q", cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "--config overrides" not in result.stderr


# A plugin of the other kind -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rsm", "embedded"], "embedded is an RLMM plugin: use --rlmm embedded"),
        (["--rlmm", "local"], "local is an RSM plugin: use --rsm local"),
        (
            ["--rsm", "tierlog.metadata.embedded:EmbeddedRemoteLogMetadataManager"],
            "tierlog.metadata.embedded:EmbeddedRemoteLogMetadataManager is an RLMM plugin: "
            "use --rlmm tierlog.metadata.embedded:EmbeddedRemoteLogMetadataManager",
        ),
    ],
)
def test_a_plugin_of_the_other_kind_names_the_right_option(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run_cli(capsys, "conformance", *argv)
    assert code == 2 and out == ""
    assert _one_error_line(err) == f"tierlog: error: {message}"


def test_the_pytest_options_name_the_right_option_too() -> None:
    with pytest.raises(
        PluginError, match=r"^embedded is an RLMM plugin: use --tierlog-rlmm embedded$"
    ):
        resolve_plugin_class("rsm", "embedded")


def test_an_unknown_plugin_keeps_the_registry_message(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "conformance", "--rsm", "no-such-rsm")
    assert code == 2 and "no rsm plugin named 'no-such-rsm'" in _one_error_line(err)


# Moved from tests/cli/test_cli.py ---------------------------------------------------------------
def test_conformance_passes_on_the_embedded_defaults(tmp_path: Path) -> None:
    """The CLI wiring: the selected suite runs on the named plugin and exits 0."""
    for target in (["--rsm", "local", "--quick"], ["--rlmm", "embedded"]):
        result = _conformance(*target, "--", "-q", "-x", cwd=tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        assert " passed" in result.stdout


def test_conformance_verdict_is_the_exit_code(tmp_path: Path) -> None:
    """A plugin that breaks the contract makes the command exit 1."""
    (tmp_path / "broken_rsm.py").write_text(
        "from tierlog.storage.local import LocalTieredStorage\n"
        "from tierlog.spi import RemoteResourceNotFoundException\n"
        "class Broken(LocalTieredStorage):\n"
        "    def delete_log_segment_data(self, m):\n"
        "        raise RemoteResourceNotFoundException('gone')\n"
    )
    result = _conformance("--rsm", "broken_rsm:Broken", "--quick", "--", "-q", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "failed" in result.stdout


def test_conformance_rejects_a_malformed_config(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "conformance", "--rsm", "local", "--config", "dir")
    assert code == 2 and "--config expects KEY=VALUE, got 'dir'" in err


def test_conformance_needs_config_when_the_plugin_declares_none(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "needs_config_rsm.py").write_text(
        "from tierlog.storage.local import LocalTieredStorage\n"
        "class NeedsConfig(LocalTieredStorage):\n"
        "    conformance_config = None\n"
    )
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, "conformance", "--rsm", "needs_config_rsm:NeedsConfig")
    assert code == 2 and "has no conformance_config()" in err and "--config" in err
