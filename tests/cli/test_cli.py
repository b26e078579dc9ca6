"""The ``tierlog`` command: plugins listing, metadata tools and the conformance runner."""

from __future__ import annotations

import argparse
import json
import sys

import pytest

from tierlog.cli import main

WORKED_EXAMPLE = (
    "010000"
    "04666f6f"
    "069f530ddb894466bd439ae5bc224ec6"
    "00000000"
    "00"
    "0102030405060708090a0b0c0d0e0f10"
    "00"
    "0000000000000000"
    "0000000000000063"
    "00000001"
    "0000018bcfe56800"
    "0000018bcfe56be8"
    "02"
    "00000000"
    "0000000000000000"
    "00"
    "00000400"
    "03cafe"
    "00"
    "01000101"
)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_worked_example_is_107_bytes() -> None:
    assert len(bytes.fromhex(WORKED_EXAMPLE)) == 107


def test_plugins_lists_builtins_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "plugins")
    assert code == 0
    rows = {(r["kind"], r["name"]): r for r in json.loads(out)}
    local = rows[("rsm", "local")]
    assert local["class"] == "tierlog.storage.local:LocalTieredStorage"
    assert local["distribution"] == "tierlog" and local["error"] is None
    assert rows[("rlmm", "embedded")]["class"] == (
        "tierlog.metadata.embedded:EmbeddedRemoteLogMetadataManager"
    )
    assert set(local) == {"name", "kind", "class", "version", "distribution", "plugin", "error"}


def test_decode_then_encode_round_trips(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "metadata", "decode", WORKED_EXAMPLE)
    assert code == 0
    decoded = json.loads(out)
    assert decoded["startOffset"] == 0 and decoded["endOffset"] == 99
    code, out, _ = run_cli(capsys, "metadata", "encode", out)
    assert code == 0
    assert out.strip() == WORKED_EXAMPLE


def test_decode_and_encode_read_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO(WORKED_EXAMPLE + "\n"))
    code, out, _ = run_cli(capsys, "metadata", "decode", "-")
    assert code == 0
    monkeypatch.setattr(sys, "stdin", io.StringIO(out))
    code, out2, _ = run_cli(capsys, "metadata", "encode", "-")
    assert (code, out2.strip()) == (0, WORKED_EXAMPLE)


def test_decode_kafka_format(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        capsys,
        "metadata",
        "decode",
        "--format",
        "kafka",
        "--partition",
        "3",
        "--offset",
        "17",
        WORKED_EXAMPLE,
    )
    assert code == 0
    assert out == (
        "partition: 3, offset: 17, value: RemoteLogSegmentMetadata{remoteLogSegmentId="
        "RemoteLogSegmentId{topicIdPartition=Bp9TDduJRGa9Q5rlvCJOxg:foo-0, "
        "id=AQIDBAUGBwgJCgsMDQ4PEA}, startOffset=0, endOffset=99, brokerId=1, "
        "maxTimestampMs=1700000000000, eventTimestampMs=1700000001000, "
        "segmentLeaderEpochs={0=0}, segmentSizeInBytes=1024, "
        "customMetadata=Optional[CustomMetadata{2 bytes}], state=COPY_SEGMENT_STARTED, "
        "txnIdxEmpty=true}\n"
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("zz", "not hexadecimal"),
        ("000000", "frame version 0"),
        (WORKED_EXAMPLE[:-6], ""),
        (WORKED_EXAMPLE + "00", "garbage"),
        ("010900", "9"),
    ],
)
def test_decode_errors_are_reported_not_raised(
    capsys: pytest.CaptureFixture[str], value: str, message: str
) -> None:
    code, out, err = run_cli(capsys, "metadata", "decode", value)
    assert code == 2 and out == ""
    assert err.startswith("tierlog: error:") and message in err


def test_encode_rejects_non_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "metadata", "encode", "{nope")
    assert code == 2 and "not JSON" in err


def test_partition_command(capsys: pytest.CaptureFixture[str]) -> None:
    from tierlog.metadata.partitioner import metadata_partition
    from tierlog.spi import TopicIdPartition, Uuid

    topic_id = "Bp9TDduJRGa9Q5rlvCJOxg"
    for p in range(4):
        code, out, _ = run_cli(
            capsys,
            "metadata",
            "partition",
            "--topic-id",
            topic_id,
            "--partition",
            str(p),
            "--partitions",
            "5",
        )
        assert code == 0
        expected = metadata_partition(TopicIdPartition(Uuid.from_string(topic_id), "", p), 5)
        assert int(out) == expected
    code, _, err = run_cli(capsys, "metadata", "partition", "--topic-id", "bad", "--partition", "0")
    assert code == 2 and "invalid Uuid" in err


@pytest.mark.parametrize(
    ("flag", "value"), [("--partition", "2147483648"), ("--partitions", "0"), ("--partition", "-1")]
)
def test_partition_command_checks_int32_ranges(
    capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    args = {"--partition": "0", "--partitions": "50", flag: value}
    code, _, err = run_cli(
        capsys,
        "metadata",
        "partition",
        "--topic-id",
        "Bp9TDduJRGa9Q5rlvCJOxg",
        *[x for kv in args.items() for x in kv],
    )
    assert code == 2 and flag in err


# Help texts --------------------------------------------------------------------------------------


def _arguments_without_help(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> list[tuple[str, ...]]:
    missing: list[tuple[str, ...]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if not helps.get(name):
                    missing.append((*path, name))
                missing += _arguments_without_help(sub, (*path, name))
        elif isinstance(action, argparse._HelpAction):
            continue  # argparse's own -h/--help
        elif not action.help or action.help == argparse.SUPPRESS:
            missing.append(
                (*path, action.option_strings[-1] if action.option_strings else action.dest)
            )
    return missing


def test_every_subcommand_and_argument_has_a_help_text() -> None:
    from tierlog.cli import build_parser

    assert _arguments_without_help(build_parser()) == []


def test_the_help_walk_finds_an_argument_without_help() -> None:
    parser = argparse.ArgumentParser(prog="x")
    commands = parser.add_subparsers()
    sub = commands.add_parser("sub", help="a subcommand")
    sub.add_argument("--documented", help="yes")
    sub.add_argument("--bare")
    sub.add_argument("thing")
    commands.add_parser("quiet")
    assert _arguments_without_help(parser) == [("sub", "--bare"), ("sub", "thing"), ("quiet",)]
