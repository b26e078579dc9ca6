"""``tierlog metadata decode`` on bad hex input: one clear line on stderr and exit status 2,
through the command's entry point (``tierlog.cli.main``)."""

from __future__ import annotations

import io
import json

import pytest

from tierlog.cli import main

# KAFKA-FACTS 1.5: a RemoteLogSegmentMetadataRecord of 107 bytes.
WORKED_EXAMPLE = (
    "010000" "04666f6f" "069f530ddb894466bd439ae5bc224ec6" "00000000" "00"
    "0102030405060708090a0b0c0d0e0f10" "00" "0000000000000000" "0000000000000063" "00000001"
    "0000018bcfe56800" "0000018bcfe56be8" "02" "00000000" "0000000000000000" "00" "00000400"
    "03cafe" "00" "01000101"
)  # fmt: skip


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["metadata", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, out: str, err: str, message: str) -> None:
    assert (code, out) == (2, "")
    assert err == f"tierlog: error: {message}\n"


@pytest.mark.parametrize(
    ("value", "digits"),
    [
        ("abc", 3),
        ("0", 1),
        ("0x ab c", 3),
        ("  01 02\n03 0\t", 7),
        (WORKED_EXAMPLE[:-1], len(WORKED_EXAMPLE) - 1),
    ],
)
def test_odd_length_hex_says_so(
    capsys: pytest.CaptureFixture[str], value: str, digits: int
) -> None:
    code, out, err = run(capsys, "decode", value)
    assert_one_line_error(
        code, out, err, f"hex input has an odd number of digits ({digits}): a byte is two digits"
    )


@pytest.mark.parametrize(
    ("value", "char", "position"),
    [
        ("zz", "z", 0),
        ("01 0g", "g", 4),
        ("0x01x2", "x", 4),
        ("0 x12", "x", 2),
        ("01-02", "-", 2),
        ("ab\u00e9", "\u00e9", 2),
    ],
)
def test_a_non_hex_character_is_named_with_its_position_in_the_input(
    capsys: pytest.CaptureFixture[str], value: str, char: str, position: int
) -> None:
    code, out, err = run(capsys, "decode", value)
    assert_one_line_error(
        code,
        out,
        err,
        f"hex input has a character that is not hexadecimal: {char!r} at position {position}",
    )


@pytest.mark.parametrize("value", ["", "   ", "0x", " 0X \n"])
def test_no_digits_at_all_is_an_empty_input(capsys: pytest.CaptureFixture[str], value: str) -> None:
    code, out, err = run(capsys, "decode", value)
    assert_one_line_error(code, out, err, "hex input is empty: give the record value as hex digits")


def test_stdin_gets_the_same_checks(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("0a0\n"))
    code, out, err = run(capsys, "decode", "-")
    assert_one_line_error(
        code, out, err, "hex input has an odd number of digits (3): a byte is two digits"
    )


@pytest.mark.parametrize(
    "value",
    [
        WORKED_EXAMPLE,
        "0x" + WORKED_EXAMPLE.upper(),
        " ".join(WORKED_EXAMPLE[i : i + 2] for i in range(0, len(WORKED_EXAMPLE), 2)) + "\n",
    ],
)
def test_blanks_case_and_a_0x_prefix_are_accepted(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    code, out, err = run(capsys, "decode", value)
    assert (code, err) == (0, "")
    assert json.loads(out)["type"] == "RemoteLogSegmentMetadataRecord"


def test_well_formed_hex_of_a_bad_record_reports_the_record_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Past the hex checks, the serde's own error is passed on, on one line."""
    code, out, err = run(capsys, "decode", "000000")
    assert (code, out) == (2, "")
    assert err.startswith("tierlog: error: ") and "frame version 0" in err
    assert err.count("\n") == 1
