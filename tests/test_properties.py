"""Java-properties reading and writing, checked against ``java.util.Properties`` itself.

``JAVA_CASES`` are texts a hand-written parser tends to get wrong. What Java 17's
``Properties.load(Reader)`` makes of each is committed in ``tests/data/properties/
java_expected.json`` (produced by ``tests/data/properties/PropertiesOracle.java``), so the test
runs without a JDK; when ``java`` is on the PATH the oracle is run again, both to confirm the
committed answers and to load what ``format_properties`` writes. To regenerate the file after
changing the cases: ``.venv/bin/python tests/test_properties.py``.
"""

from __future__ import annotations

import base64
import json
import logging
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.properties import (
    ConfigKey,
    ConfigValueError,
    at_least,
    between,
    did_you_mean,
    format_properties,
    load_properties,
    non_empty,
    parse_bool,
    parse_double,
    parse_int,
    parse_list,
    parse_long,
    parse_overrides,
    parse_properties,
    parse_string,
    read_properties,
)
from tierlog.spi import ConfigError

DATA = Path(__file__).parent / "data" / "properties"
ORACLE = DATA / "PropertiesOracle.java"
EXPECTED = DATA / "java_expected.json"

JAVA_CASES: dict[str, str] = {
    "separators": "a=1\nb:2\nc 3\nd\t4\ne\f5\n",
    "blanks_around_separator": "a = 1\nb : 2\nc   =   3\nd\t:\tfour\n",
    "second_separator_is_value": "a==1\nb:=2\nc = = 3\nd  :  :x\ne =:y\n",
    "key_without_value": "lonely\nempty=\nblanks   \ncolon:\n",
    "leading_blanks_dropped": "   a=1\n\t\fb=2\n",
    "comments": "#c=1\n!c=2\n  # indented=3\n\t! also=4\na=1 # not a comment\nb=#value\n",
    "value_keeps_trailing_blanks": "a=1  \nb=2\t\n",
    "continuation": "a=one\\\n    two\\\n\tthree\nb=after\n",
    "even_backslashes_do_not_continue": "a=x\\\\\nb=y\\\\\\\n  z\nc=w\\\\\\\\\\\n v\n",
    "hash_after_continuation_is_text": "a=x\\\n# not a comment\nb=2\n",
    "blank_line_ends_continuation": "a=x\\\n\nb=y\n",
    "blanks_only_line_ends_continuation": "a=x\\\n   \nb=y\n",
    "backslash_only_line_then_comment": "\\\n# a comment after all\nk=v\n",
    "backslash_only_line_then_key": "\\\n   k=v\n",
    "crlf": "a=1\r\nb=2\r\n",
    "cr_only": "a=1\rb=2\r",
    "crlf_continuation": "a=x\\\r\n  y\r\nb=2",
    "cr_continuation": "a=x\\\r  y\rb=2",
    "lf_cr_continuation": "a=x\\\n\r  y\n",
    "trailing_backslash_at_eof": "a=x\\",
    "trailing_backslash_then_newline_at_eof": "a=x\\\n",
    "escapes": 'a=\\t\\n\\r\\f\\\\\\q\\=\\:\\#\\!\\ \\"\n',
    "escaped_separators_in_key": "my\\ key=v\nk\\=ey=v2\nk\\:x:v3\n\\#k=v4\n",
    "unicode_escapes": "a=\\u0041\\u00e9\\u20AC\nb=\\uD83D\\uDE00\nc=\\uD800\nd=\\u0000\n",
    "unicode_escape_across_continuation": "a=\\u00\\\n   41\n",
    "escaped_blank_value": "a=\\ lead\nb=\\\tx\n",
    "non_ascii_text": "clé=välue€😀\nnbsp\u00a0key=x\n",
    "duplicates_last_wins": "a=1\nb=2\na=3\n",
    "empty_key": "=v\n:w\n",
    "empty_text": "",
    "only_comments_and_blank_lines": "\n\n# x\n   \n!y",
    "comment_at_eof_without_newline": "a=1\n# trailing",
    "separator_chars_in_value": "url=http://h:9092/a=b c\n",
    "kafka_server_properties": (
        "############################# Server Basics #############################\n"
        "process.roles=broker,controller\n"
        "node.id=1\n"
        "controller.quorum.bootstrap.servers=localhost:9093\n"
        "listeners=PLAINTEXT://:9092,CONTROLLER://:9093\n"
        "log.dirs=/tmp/kraft-combined-logs\n"
        "remote.log.storage.system.enable=true\n"
        "rsm.config.dir = /var/tier\n"
    ),
    "malformed_u_too_short": "a=\\u12\n",
    "malformed_u_not_hex": "a=\\u12G4\n",
    "malformed_u_in_key": "\\uZZZZ=1\n",
}

MALFORMED_LINES = {
    "malformed_u_too_short": 1,
    "malformed_u_not_hex": 1,
    "malformed_u_in_key": 1,
}


def _units(data: str) -> str:
    """A string from the oracle's UTF-16BE code units (lone surrogates kept)."""
    raw = base64.b64decode(data)
    return raw.decode("utf-16-be", "surrogatepass")


def run_oracle(cases: dict[str, str]) -> dict[str, dict[str, object]]:
    """Run PropertiesOracle.java on ``cases``: name -> {"values": {...}} or {"error": msg}."""
    lines = "".join(
        f"{name}\t{base64.b64encode(text.encode('utf-8')).decode()}\n"
        for name, text in cases.items()
    )
    done = subprocess.run(
        ["java", str(ORACLE)], input=lines.encode(), capture_output=True, check=True, timeout=120
    )
    results: dict[str, dict[str, object]] = {}
    for row in done.stdout.decode().splitlines():
        name, status, *rest = row.split("\t")
        if status == "OK":
            pairs = [_units(x) for x in rest]
            results[name] = {"values": dict(zip(pairs[::2], pairs[1::2], strict=True))}
        else:
            results[name] = {"error": rest[0]}
    return results


def as_java(mapping: dict[str, str]) -> dict[str, str]:
    """``mapping`` as Java holds it: a high surrogate followed by a low one is one character.

    Python can hold the two halves as two code points; UTF-16 (Java, and the text a properties
    file denotes) cannot tell them from the character, so that is the identity to expect.
    """

    def norm(s: str) -> str:
        return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")

    return {norm(k): norm(v) for k, v in mapping.items()}


def load_expected() -> dict[str, dict[str, object]]:
    data: dict[str, dict[str, object]] = json.loads(EXPECTED.read_text(encoding="utf-8"))
    return data


# Against Java --------------------------------------------------------------------------------
def test_committed_oracle_output_covers_exactly_the_cases() -> None:
    expected = load_expected()
    assert set(expected) == set(JAVA_CASES)
    for name, text in JAVA_CASES.items():
        assert expected[name]["input"] == text, f"{name}: regenerate {EXPECTED.name}"


@pytest.mark.parametrize("name", sorted(JAVA_CASES))
def test_parse_matches_java(name: str) -> None:
    expected = load_expected()[name]
    text = JAVA_CASES[name]
    if "error" in expected:
        assert "Malformed \\uxxxx encoding" in str(expected["error"])
        with pytest.raises(ConfigError, match=r"Malformed \\uxxxx encoding") as info:
            parse_properties(text, "server.properties")
        assert f"server.properties:{MALFORMED_LINES[name]}:" in str(info.value)
    else:
        assert parse_properties(text).values == expected["values"]


requires_java = pytest.mark.skipif(shutil.which("java") is None, reason="no java on PATH")


@requires_java
def test_committed_oracle_output_is_what_java_says() -> None:
    fresh = run_oracle(JAVA_CASES)
    committed = load_expected()
    for name in JAVA_CASES:
        assert {k: v for k, v in committed[name].items() if k != "input"} == fresh[name], name


def _random_text(rng: random.Random) -> str:
    alphabet = " \t\f\r\n=:#!\\u0aZé€\u00a0\u2028😀\ud800\udfff"
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12)))


@requires_java
def test_java_loads_what_format_writes() -> None:
    rng = random.Random(405)
    samples = [
        {_random_text(rng): _random_text(rng) for _ in range(rng.randrange(1, 5))}
        for _ in range(300)
    ]
    texts = {f"s{i}": format_properties(sample) for i, sample in enumerate(samples)}
    for name, text in texts.items():
        assert text.isascii(), name  # readable by Kafka's ISO-8859-1 loader too
    fresh = run_oracle(texts)
    for i, sample in enumerate(samples):
        assert fresh[f"s{i}"] == {"values": as_java(sample)}, texts[f"s{i}"]


# Python-side behaviour ------------------------------------------------------------------------
def test_duplicates_and_lines_are_reported() -> None:
    parsed = parse_properties("a=1\n\nb=2\\\n  more\na=3\nc=4\n", "x.properties")
    assert parsed.values == {"a": "3", "b": "2more", "c": "4"}
    assert parsed.duplicates == {"a": (1, 5)}
    assert parsed.lines == {"a": 5, "b": 3, "c": 6}
    assert parsed.location("c") == "x.properties:6"
    assert parsed.location("zzz") == "x.properties"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("a=1\nb=\\u00zz\n", 2),
        ("a=1\r\nb=2\r\nc=\\u1\r\n", 3),
        ("a=1\rb=2\rc=\\u1\r", 3),
        ("# c\n\n  k=fine\\\n    \\u12\\\n  x\n", 4),  # the bad escape is on a continued line
        ("k=v\\\r\n  w\r\nz=\\uq", 3),
    ],
)
def test_malformed_escape_names_the_physical_line(text: str, line: int) -> None:
    with pytest.raises(ConfigError, match=rf"^f\.properties:{line}: Malformed"):
        parse_properties(text, "f.properties")


def test_surrogate_pair_escape_is_one_character() -> None:
    assert parse_properties("a=\\uD83D\\uDE00").values["a"] == "😀"
    assert parse_properties("a=\\uDE00\\uD83D").values["a"] == "\ude00\ud83d"


def test_load_properties_reads_utf8_and_logs_duplicates(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "server.properties"
    path.write_bytes("name=välue\nk=1\nk=2\n".encode())
    with caplog.at_level(logging.WARNING, logger="tierlog.properties"):
        assert load_properties(path) == {"name": "välue", "k": "2"}
    assert "k is set 2 times (lines 2, 3)" in caplog.text
    # As a Kafka broker reads it (ISO-8859-1): the two UTF-8 bytes become two characters.
    assert load_properties(path, encoding="latin-1")["name"] == "vÃ¤lue"


def test_read_properties_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read properties file .*missing"):
        read_properties(tmp_path / "missing")
    bad = tmp_path / "bad.properties"
    bad.write_bytes(b"a=1\nb=\xff\n")
    with pytest.raises(ConfigError, match=r"bad\.properties:2: not valid utf-8: byte 0xff"):
        read_properties(bad)
    with pytest.raises(ConfigError, match="unknown encoding"):
        read_properties(bad, encoding="no-such-codec")


# Writing ---------------------------------------------------------------------------------------
def test_format_escapes_like_java() -> None:
    text = format_properties(
        {"a key": " lead and inner ", "k=:#!": "v=:#!\\", "tab\t": "\n\r\f", "é€😀": "\x01"},
        comments=["written by tierlog", "two\nlines"],
    )
    assert text == (
        "# written by tierlog\n"
        "# two\n"
        "# lines\n"
        "a\\ key=\\ lead and inner \n"
        "k\\=\\:\\#\\!=v\\=\\:\\#\\!\\\\\n"
        "tab\\t=\\n\\r\\f\n"
        "\\u00E9\\u20AC\\uD83D\\uDE00=\\u0001\n"
    )


def test_format_renders_kafka_values() -> None:
    text = format_properties({"b": True, "n": -3, "l": ["delete", "compact"], "f": 0.25})
    assert parse_properties(text).values == {
        "b": "true",
        "n": "-3",
        "l": "delete,compact",
        "f": "0.25",
    }
    with pytest.raises(TypeError, match="cannot write x"):
        format_properties({"x": object()})
    with pytest.raises(TypeError, match="keys must be strings"):
        format_properties({1: "x"})  # type: ignore[dict-item]


_ANY_TEXT = st.text(
    alphabet=st.one_of(
        st.characters(codec=None),
        st.sampled_from(" \t\f\r\n=:#!\\"),
        st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
    )
)


@given(st.dictionaries(_ANY_TEXT, _ANY_TEXT, max_size=8))
def test_format_then_parse_is_identity(mapping: dict[str, str]) -> None:
    assert parse_properties(format_properties(mapping)).values == as_java(mapping)


# Overrides -------------------------------------------------------------------------------------
def test_parse_overrides_like_kafka_server_start() -> None:
    assert parse_overrides(["a=1", "b=x=y", "c=", "a=2", " d = e"]) == {
        "a": "2",
        "b": "x=y",
        "c": "",
        " d ": " e",
    }
    with pytest.raises(ConfigError, match="expected key=value"):
        parse_overrides(["novalue"])
    with pytest.raises(ConfigError, match="key is empty"):
        parse_overrides(["=v"])


# Typed values ----------------------------------------------------------------------------------
def test_integers_parse_as_java() -> None:
    assert parse_int("k", " 42\t") == 42
    assert parse_int("k", "+7") == 7
    assert parse_int("k", -5) == -5
    assert parse_long("k", str(2**63 - 1)) == 2**63 - 1
    for bad in ("1_000", "1.0", "", "٣", "0x10", str(2**31)):
        with pytest.raises(ConfigValueError, match="for configuration k: Not a number of type INT"):
            parse_int("k", bad)
    with pytest.raises(ConfigValueError, match="Not a number of type LONG"):
        parse_long("k", str(2**63))
    with pytest.raises(ConfigValueError, match="not a bool"):
        parse_long("k", True)
    with pytest.raises(ConfigValueError, match="but it was a float"):
        parse_int("k", 1.5)


def test_other_types_parse_as_java() -> None:
    assert parse_bool("k", " TRUE ") is True
    assert parse_bool("k", "false") is False
    with pytest.raises(ConfigValueError, match="either true or false"):
        parse_bool("k", "yes")
    assert parse_double("k", "0.25") == 0.25
    assert parse_double("k", "1e-1") == 0.1
    assert parse_double("k", 1) == 1.0
    for bad in ("NaN", "Infinity", "1_0", "abc", ""):
        with pytest.raises(ConfigValueError, match="Not a number of type DOUBLE"):
            parse_double("k", bad)
    assert parse_string("k", "  x  ") == "x"
    with pytest.raises(ConfigValueError, match="Expected value to be a string"):
        parse_string("k", 3)
    assert parse_list("k", " a , b,c ") == ("a", "b", "c")
    assert parse_list("k", "a,,b") == ("a", "", "b")
    assert parse_list("k", "  ") == ()
    assert parse_list("k", ["x", " y"]) == ("x", "y")


def test_validators_use_kafkas_words() -> None:
    at_least("k", 1, 1)
    with pytest.raises(ConfigValueError, match="Invalid value 0 for configuration k: Value must"):
        at_least("k", 0, 1)
    between("k", 0.5, 0, 0.5)
    with pytest.raises(ConfigValueError, match=r"Value must be no more than 0\.5"):
        between("k", 0.51, 0, 0.5)
    non_empty("k", None)
    with pytest.raises(ConfigValueError, match="String must be non-empty"):
        non_empty("k", "")


# Key tables ------------------------------------------------------------------------------------
def test_a_config_key_parses_as_its_kafka_type() -> None:
    assert ConfigKey("a.b", "int").parse(" 7 ") == 7
    assert ConfigKey("a.b", "long").parse(str(2**40)) == 2**40
    assert ConfigKey("a.b", "boolean").parse("TRUE") is True
    assert ConfigKey("a.b", "double").parse("0.5") == 0.5
    assert ConfigKey("a.b", "string").parse(" x ") == "x"
    assert ConfigKey("a.b", "list").parse("delete, ,compact,") == ("delete", "compact")
    assert ConfigKey("a.b", "int", optional=True).parse(None) is None
    with pytest.raises(ConfigValueError, match=r"for configuration a\.b: Not a number of type INT"):
        ConfigKey("a.b", "int").parse(str(2**31))
    with pytest.raises(ConfigValueError, match=r"a\.b"):
        ConfigKey("a.b", "int").parse(None)  # not optional: None is not an integer
    assert ConfigKey("segment.jitter.ms", "long").attr == "segment_jitter_ms"


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (ConfigKey("k", "int", minimum=1), 0, "Value must be at least 1"),
        (ConfigKey("k", "int", minimum=1), "1", "expected an integer"),
        (ConfigKey("k", "int", minimum=1), True, "expected an integer"),
        (ConfigKey("k", "int"), 2**31, "Not a number of type INT"),
        (ConfigKey("k", "double", minimum=0, maximum=0.5), 0.75, "Value must be no more than 0.5"),
        (ConfigKey("k", "double"), float("nan"), "expected a finite number"),
        (ConfigKey("k", "long", maximum=10), 11, "Value must be no more than 10"),
        (ConfigKey("k", "boolean"), 1, "expected a boolean"),
        (ConfigKey("k", "string", non_empty=True), "", "String must be non-empty"),
        (ConfigKey("k", "string", choices=("A", "B")), "C", "String must be one of: A, B"),
        (ConfigKey("k", "string", optional=True), 3, "expected a string"),
        (ConfigKey("k", "list"), ["a"], "expected a tuple of strings"),
    ],
)
def test_a_config_key_checks_type_and_validator(key: ConfigKey, value: object, reason: str) -> None:
    with pytest.raises(ConfigValueError, match=re.escape(f"for configuration k: {reason}")):
        key.check(value)


def test_a_config_key_accepts_what_its_validator_accepts() -> None:
    ConfigKey("k", "int", minimum=1, maximum=3).check(3)
    ConfigKey("k", "double", minimum=0, maximum=0.5).check(0.5)
    ConfigKey("k", "string", optional=True, non_empty=True).check(None)
    ConfigKey("k", "string", choices=("A", "B")).check("B")
    ConfigKey("k", "list").check(("a", "b"))
    ConfigKey("k", "boolean", minimum=1).check(False)  # bounds apply to numbers only


def test_did_you_mean_names_a_near_miss_only() -> None:
    known = ["segment.bytes", "segment.ms", "retention.ms", "retention.bytes"]
    assert did_you_mean("segmnet.bytes", known) == " (did you mean segment.bytes?)"
    assert did_you_mean("retention.byte", iter(known)) == " (did you mean retention.bytes?)"
    assert did_you_mean("retention.hour", known) == ""  # shares words, not a typo
    assert did_you_mean("bogus", known) == ""
    assert did_you_mean("segment.bytes", []) == ""


def test_config_value_error_keeps_its_parts() -> None:
    import pickle

    err = ConfigValueError("a.b", "x", "why")
    assert (err.key, err.value, err.reason) == ("a.b", "x", "why")
    assert isinstance(err, ConfigError)
    again = pickle.loads(pickle.dumps(err))
    assert (again.key, str(again)) == ("a.b", str(err))


def _regenerate() -> None:
    results = run_oracle(JAVA_CASES)
    out = {name: {"input": JAVA_CASES[name], **results[name]} for name in JAVA_CASES}
    EXPECTED.write_text(json.dumps(out, indent=1, ensure_ascii=True) + "\n", encoding="utf-8")
    print(f"wrote {EXPECTED} ({len(out)} cases)", file=sys.stderr)


if __name__ == "__main__":
    _regenerate()
