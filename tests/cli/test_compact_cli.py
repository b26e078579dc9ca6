"""``tierlog compact``, through ``main()``: on a running node (``--topic``/``--partition``, a
real node behind its real HTTP API) and offline (a partition directory a node wrote and
closed), with the same summary, and the usage errors of mixing the two forms."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tierlog.cli import main
from tierlog.cli._compact import summary_line
from tierlog.node import Node
from tierlog.node.http_api import HttpApi


def node_props(tmp_path: Path, **extra: object) -> dict[str, object]:
    """Remote storage on, periodic tasks an hour apart (``tier_now`` drives them)."""
    props: dict[str, object] = {
        "log.dirs": tmp_path / "logs",
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": 3_600_000,
        "log.retention.check.interval.ms": 3_600_000,
    }
    props.update({k.replace("_", "."): v for k, v in extra.items()})
    return props


KEYS = 10
ROUNDS = 12
CONFIGS = {"cleanup.policy": "compact", "internal.segment.bytes": "1024"}


def produce(node: Node, topic: str, rounds: int = ROUNDS) -> None:
    for r in range(rounds):
        node.produce(topic, [(f"k{k}".encode(), f"v{r}-{k}".encode() * 4) for k in range(KEYS)])
    node.log(topic, 0).roll()


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    props = node_props(
        tmp_path,
        log_cleaner_enable="false",
        remote_log_compaction_engine="python",
        num_partitions=1,
    )
    with Node(props) as n:
        yield n


@pytest.fixture
def url(node: Node) -> Iterator[str]:
    with HttpApi(node, "127.0.0.1", 0) as api:
        yield api.url


def test_a_round_on_a_node_prints_its_summary_and_progress(
    node: Node, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    node.create_topic("table", 1, {**CONFIGS, "remote.storage.enable": "true"})
    produce(node, "table")
    node.tier_now("table")
    end = node.log("table", 0).log_end_offset
    assert main(["compact", "--topic", "table", "--partition", "0", "--url", url]) == 0
    out, err = capsys.readouterr()
    first, *rows = out.splitlines()
    assert first.startswith(f"table-0: cleaned dirty section [0, {end}) in ")
    assert f"({KEYS * ROUNDS:,} records), end " in first
    assert f"({KEYS:,} records)" in first
    assert "remote storage: 0 B downloaded" in first
    figures = dict(row.split(maxsplit=1) for row in rows)
    assert figures["records_kept"] == str(KEYS)
    assert figures["records_dropped"] == str(KEYS * (ROUNDS - 1))
    assert figures["tiered"] == "true" and figures["cleaned"] == "true"
    assert int(figures["segments_published"]) == int(figures["segments_written"]) > 0
    # Progress of both passes on stderr, as the node reported it.
    assert f"[compact] table-0 on {url}: one round (forced)" in err
    assert "[pass 1: offset map] 100.0%" in err and "[pass 2: rewrite] 100.0%" in err
    assert node.log("table", 0).cleaner_offset == end

    # --no-force: nothing is dirty now, so nothing runs; the JSON says why.
    assert main(["compact", "--topic", "table", "--partition", "0", "--url", url, "--no-force",
                 "--format", "json"]) == 0  # fmt: skip
    summary = json.loads(capsys.readouterr().out)
    assert summary["cleaned"] is False and summary["dirty_ratio"] == 0.0
    assert summary["first_dirty_offset"] == summary["end_offset"] == end


def test_the_url_comes_from_the_environment(
    node: Node, url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    node.create_topic("table", 1, CONFIGS)
    produce(node, "table", rounds=3)
    monkeypatch.setenv("TIERLOG_URL", url)
    assert main(["compact", "--topic", "table", "--partition", "0", "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["cleaned"] is True and summary["tiered"] is False
    assert summary["records_kept"] == KEYS


def test_offline_and_on_a_node_print_the_same_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same log, cleaned by a node and offline from a copy of its directory: the same
    figures (the clock aside)."""
    logs = tmp_path / "offline" / "logs"
    with Node({"log.dirs": str(logs), "log.cleaner.enable": "false"}) as writer:
        writer.create_topic("table", 1, CONFIGS)
        produce(writer, "table")
    # A partition directory has no topic config (Kafka keeps it in its metadata): given here.
    configs = [f"--config={k}={v}" for k, v in CONFIGS.items()]
    assert main(["compact", str(logs / "table-0"), *configs, "--format", "json"]) == 0
    offline = json.loads(capsys.readouterr().out)

    props = node_props(
        tmp_path / "node", log_cleaner_enable="false", remote_log_compaction_engine="python"
    )
    with Node(props) as node, HttpApi(node, "127.0.0.1", 0) as api:
        node.create_topic("table", 1, CONFIGS)
        produce(node, "table")
        args = ["compact", "--topic", "table", "--partition", "0", "--url", api.url]
        assert main([*args, "--format", "json"]) == 0
    on_node = json.loads(capsys.readouterr().out)
    for summary in (offline, on_node):
        summary.pop("elapsed_s")
    assert offline == on_node
    assert offline["cleaned"] is True and offline["records_kept"] == KEYS
    # And as text: the same line.
    assert summary_line({**offline, "elapsed_s": 0}) == summary_line({**on_node, "elapsed_s": 0})
    # The offline round wrote Kafka's checkpoint file in the log directory.
    checkpoint = (logs / "cleaner-offset-checkpoint").read_text().split()
    assert checkpoint == ["0", "1", "table", "0", str(offline["end_offset"])]


def test_offline_is_not_forced_by_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "logs"
    with Node({"log.dirs": str(logs), "log.cleaner.enable": "false"}) as writer:
        writer.create_topic("table", 1, CONFIGS)
        produce(writer, "table")
    ratio = ["--config", "min.cleanable.dirty.ratio=0.99", "--config", "cleanup.policy=compact"]
    # Cleaned once; then a single new version of one key is far below the ratio.
    assert main(["compact", str(logs / "table-0"), *ratio]) == 0
    capsys.readouterr()
    with Node({"log.dirs": str(logs), "log.cleaner.enable": "false"}) as writer:
        writer.produce("table", [(b"k0", b"new")])
        writer.log("table", 0).roll()
    assert main(["compact", str(logs / "table-0"), *ratio]) == 0
    assert capsys.readouterr().out.startswith("table-0: not cleaned (dirty ratio ")
    assert main(["compact", str(logs / "table-0"), *ratio, "--force"]) == 0
    assert capsys.readouterr().out.startswith("table-0: cleaned dirty section ")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "nothing to compact: give either a partition directory"),
        (["DIR", "--topic", "t", "--partition", "0"], "a partition directory and --topic"),
        (["--topic", "t"], "a node's partition needs --partition too"),
        (["--partition", "0"], "a node's partition needs --topic too"),
        (
            ["--topic", "t", "--partition", "0", "--engine", "spark"],
            "--engine applies to a partition directory (offline)",
        ),
        (
            ["--topic", "t", "--partition", "0", "--config", "a=b", "--now-ms", "5"],
            "--config, --now-ms apply to a partition directory (offline)",
        ),
        (["DIR", "--url", "http://127.0.0.1:1"], "--url applies to a node's partition"),
        (["DIR", "--spark-master", "local[1]"], "--spark-master and --spark-conf need --engine"),
    ],
)
def test_one_form_per_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    args = [str(tmp_path) if a == "DIR" else a for a in args]
    assert main(["compact", *args]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("tierlog: error: ") and message in err


def test_an_unreachable_node_and_a_topic_that_is_not_compacted(
    node: Node, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    node.create_topic("events", 1)
    assert main(["compact", "--topic", "events", "--partition", "0", "--url", url]) == 2
    assert "can not be compacted due to the configured policy" in capsys.readouterr().err
    dead = "http://127.0.0.1:1"
    assert main(["compact", "--topic", "t", "--partition", "0", "--url", dead]) == 2
    assert f"cannot reach {dead}" in capsys.readouterr().err
