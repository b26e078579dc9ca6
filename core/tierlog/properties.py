"""Java ``.properties`` text and Kafka's typed configuration values.

Kafka reads ``server.properties`` with ``java.util.Properties.load`` and a user who moves a file
from a Kafka broker to tierlog must get the same keys and values, including for the corners
people trip on: ``key value`` and ``key:value`` as well as ``key=value``, ``!`` comments,
a trailing backslash that joins the next line (whose leading blanks are dropped), an even number
of trailing backslashes that does not, ``\\uXXXX`` escapes, ``\\`` before any other character
standing for that character, and the last of two equal keys winning. ``parse_properties`` is a
line-for-line port of that algorithm (the JDK's ``LineReader``, ``load0`` and ``loadConvert``);
``tests/test_properties.py`` checks it against ``java.util.Properties`` itself.

What this module adds to Java's behaviour, because a broken configuration should be found
before the broker runs rather than after:

- a malformed ``\\uXXXX`` escape raises ``ConfigError`` naming the file and the physical line
  (Java: ``IllegalArgumentException: Malformed \\uxxxx encoding.``, without either);
- keys given twice are kept (last wins, as in Java) but listed in ``ParsedProperties.duplicates``
  and logged by ``load_properties``, since a second ``log.dirs=`` line is usually a mistake;
- the line of each key is kept (``ParsedProperties.lines``) so a later ``ConfigValueError`` can
  be reported as ``server.properties:12``.

Files are decoded as UTF-8 by default. Kafka's ``Utils.loadProps`` reads bytes as ISO-8859-1
(``Properties.load(InputStream)``); the two agree on ASCII files, which is what
``format_properties`` writes (everything else is ``\\uXXXX``-escaped). Pass
``encoding="latin-1"`` to read exactly as a Kafka broker would.

The second half of the module is Kafka's ``ConfigDef.parseType`` and its range validators for the
values read from such files (``parse_int``, ``parse_long``, ``parse_bool``, ``at_least``, ...),
so every component of tierlog parses ``"1_000"`` or ``" true "`` the same way Kafka does and
reports a bad one in Kafka's words, as a ``ConfigValueError`` that names the key. These are the
only parsing rules: ``parse_bool`` in particular is the one reading of a boolean anywhere in
tierlog, and a getter with a default (``tierlog.storage.objectstore.config.get_bool``) calls it.

``ConfigKey`` is one row of a configuration's key table (Kafka's ``ConfigDef.define``): the key,
its type, its validator and its documentation. ``LogConfig``, ``RemoteLogManagerConfig`` and the
object-store RSMs (``tierlog.storage.objectstore.config`` re-exports it for plugins) describe
their keys with it, so a key is parsed, checked and documented the same way in every one.
"""

from __future__ import annotations

import bisect
import difflib
import logging
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Final, Literal

from tierlog.spi import ConfigError

__all__ = [
    "ConfigKey",
    "ConfigValueError",
    "KeyType",
    "ParsedProperties",
    "at_least",
    "between",
    "did_you_mean",
    "format_properties",
    "load_properties",
    "non_empty",
    "parse_bool",
    "parse_double",
    "parse_int",
    "parse_list",
    "parse_long",
    "parse_overrides",
    "parse_properties",
    "parse_string",
    "read_properties",
]

_LOG = logging.getLogger(__name__)

_WHITESPACE: Final = " \t\f"
_EOL: Final = "\r\n"


# Reading -----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ParsedProperties:
    """The result of reading one properties text: the values and where each came from."""

    source: str
    """The file name (or ``<string>``), used in error messages."""
    values: dict[str, str]
    """Every key with its value, in the order keys first appeared; the last of duplicates wins."""
    lines: dict[str, int] = field(default_factory=dict)
    """For each key, the 1-based physical line on which its winning entry starts."""
    duplicates: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """Keys set more than once, with every line that set them (the last one won)."""

    def location(self, key: str) -> str:
        """``source:line`` of ``key`` (just ``source`` if the key is not in the text)."""
        line = self.lines.get(key)
        return self.source if line is None else f"{self.source}:{line}"


def _logical_lines(text: str) -> Iterator[tuple[str, list[int], list[int]]]:
    """Java's ``Properties.LineReader``: yield each logical line with a map of its positions.

    The map is two parallel lists, offsets into the logical line and the physical line number
    that starts there, so an error inside a continued line points at the right physical line.
    Physical lines end at ``\\n``, ``\\r\\n`` or a lone ``\\r``, as for Java.
    """
    n = len(text)
    i = 0
    line_no = 1
    while True:
        buf: list[str] = []
        offsets: list[int] = []
        numbers: list[int] = []
        skip_white = True
        appended_line_begin = False
        preceding_backslash = False
        while True:
            if i >= n:
                if buf:
                    if preceding_backslash:
                        buf.pop()
                    yield "".join(buf), offsets, numbers
                return
            c = text[i]
            i += 1
            if skip_white:
                if c in _WHITESPACE:
                    continue
                if not appended_line_begin and c in _EOL:
                    if c == "\n" or i >= n or text[i] != "\n":
                        line_no += 1
                    continue
                skip_white = False
                appended_line_begin = False
            if not buf and c in "#!":
                # A comment: only where a logical line starts (even after a continuation that
                # left the line empty, as Java does). Consume through the end of the line.
                while i < n and text[i] not in _EOL:
                    i += 1
                if i >= n:
                    return
                if text[i] == "\n" or i + 1 >= n or text[i + 1] != "\n":
                    line_no += 1
                i += 1
                skip_white = True
                continue
            if c not in _EOL:
                if not buf:
                    offsets, numbers = [0], [line_no]
                buf.append(c)
                preceding_backslash = (not preceding_backslash) if c == "\\" else False
                continue
            # End of a physical line.
            if c == "\n" or i >= n or text[i] != "\n":
                line_no += 1
            if not buf:
                skip_white = True
                continue
            if i >= n:
                if preceding_backslash:
                    buf.pop()
                yield "".join(buf), offsets, numbers
                return
            if not preceding_backslash:
                yield "".join(buf), offsets, numbers
                break
            # An odd number of backslashes: the line continues on the next physical line, whose
            # leading blanks are skipped; a \r\n pair counts as one line end.
            buf.pop()
            skip_white = True
            appended_line_begin = True
            preceding_backslash = False
            if c == "\r" and i < n and text[i] == "\n":
                i += 1
                line_no += 1
            offsets.append(len(buf))
            numbers.append(line_no)


def _split_key_value(line: str) -> tuple[int, int]:
    """Java's ``load0``: where the key ends and the value starts in a logical line."""
    limit = len(line)
    key_len = 0
    value_start = limit
    has_sep = False
    preceding_backslash = False
    while key_len < limit:
        c = line[key_len]
        if c in "=:" and not preceding_backslash:
            value_start = key_len + 1
            has_sep = True
            break
        if c in _WHITESPACE and not preceding_backslash:
            value_start = key_len + 1
            break
        preceding_backslash = (not preceding_backslash) if c == "\\" else False
        key_len += 1
    while value_start < limit:
        c = line[value_start]
        if c not in _WHITESPACE:
            if not has_sep and c in "=:":
                has_sep = True
            else:
                break
        value_start += 1
    return key_len, value_start


_SIMPLE_ESCAPES: Final = {"t": "\t", "r": "\r", "n": "\n", "f": "\f"}
_HEX: Final = frozenset("0123456789abcdefABCDEF")


def _unescape(line: str, start: int, end: int) -> str:
    """Java's ``loadConvert`` over ``line[start:end]``.

    ``\\uXXXX`` gives one UTF-16 code unit, as in Java; a surrogate pair written as two escapes
    becomes one character. Raises ``_MalformedEscape`` with the offset of the bad escape.
    """
    part = line[start:end]
    if "\\" not in part:
        return part
    out: list[str] = []
    i = start
    has_surrogate = False
    while i < end:
        c = line[i]
        i += 1
        if c != "\\":
            out.append(c)
            continue
        # The line reader never leaves an unpaired backslash at the end, so this is in range.
        c = line[i]
        i += 1
        if c == "u":
            digits = line[i : i + 4]
            if i > end - 4 or not all(d in _HEX for d in digits):
                raise _MalformedEscape(i - 2)
            code = int(digits, 16)
            has_surrogate = has_surrogate or 0xD800 <= code <= 0xDFFF
            out.append(chr(code))
            i += 4
        else:
            out.append(_SIMPLE_ESCAPES.get(c, c))
    text = "".join(out)
    if has_surrogate:
        # Join surrogate pairs into one code point; a lone surrogate stays, as in a Java String.
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return text


class _MalformedEscape(Exception):
    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.offset = offset


def parse_properties(text: str, source: str = "<string>") -> ParsedProperties:
    """Parse properties text exactly as ``java.util.Properties.load(Reader)`` does.

    Raises ``ConfigError`` naming ``source`` and the physical line for a malformed ``\\uXXXX``
    escape.
    """
    values: dict[str, str] = {}
    lines: dict[str, int] = {}
    seen: dict[str, list[int]] = {}
    for line, offsets, numbers in _logical_lines(text):
        key_len, value_start = _split_key_value(line)
        try:
            key = _unescape(line, 0, key_len)
            value = _unescape(line, value_start, len(line))
        except _MalformedEscape as exc:
            physical = numbers[bisect.bisect_right(offsets, exc.offset) - 1]
            escape = line[exc.offset : exc.offset + 6]
            raise ConfigError(
                f"{source}:{physical}: Malformed \\uxxxx encoding {escape!r} "
                "(\\u must be followed by four hexadecimal digits)"
            ) from None
        values[key] = value
        lines[key] = numbers[0]
        seen.setdefault(key, []).append(numbers[0])
    duplicates = {k: tuple(v) for k, v in seen.items() if len(v) > 1}
    return ParsedProperties(source, values, lines, duplicates)


def read_properties(path: str | os.PathLike[str], *, encoding: str = "utf-8") -> ParsedProperties:
    """Read and parse a properties file (see the module docstring about ``encoding``).

    Raises ``ConfigError`` naming the file for an unreadable file, bytes that are not valid in
    ``encoding`` (with the line), or a malformed escape (with the line).
    """
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ConfigError(f"cannot read properties file {name}: {exc.strerror or exc}") from exc
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"{name}:{line}: not valid {encoding}: byte {data[exc.start]:#04x} "
            f"(write non-ASCII characters as \\uXXXX escapes, or pass the file's encoding)"
        ) from None
    except LookupError as exc:
        raise ConfigError(f"unknown encoding {encoding!r} for {name}") from exc
    return parse_properties(text, name)


def load_properties(path: str | os.PathLike[str], *, encoding: str = "utf-8") -> dict[str, str]:
    """The keys and values of a properties file, as Kafka's ``Utils.loadProps`` gives them.

    Keys set more than once are logged as a warning (the last value wins, as in Kafka).
    """
    parsed = read_properties(path, encoding=encoding)
    for key, at in parsed.duplicates.items():
        _LOG.warning(
            "%s: %s is set %d times (lines %s); the last value is used",
            parsed.source,
            key,
            len(at),
            ", ".join(str(n) for n in at),
        )
    return parsed.values


# Writing -----------------------------------------------------------------------------------------
def _escape(text: str, *, is_key: bool) -> str:
    """Java's ``saveConvert`` with ``escUnicode``: the output is printable ASCII.

    Spaces are escaped everywhere in a key but only at the start of a value (where the reader
    would drop them); ``= : # !`` and the backslash are always escaped, so no key can be cut
    short and no line can be read as a comment.
    """
    out: list[str] = []
    for index, ch in enumerate(text):
        code = ord(ch)
        if 61 < code < 127:
            out.append("\\\\" if ch == "\\" else ch)
        elif ch == " ":
            out.append("\\ " if is_key or index == 0 else " ")
        elif ch in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[ch])
        elif ch in "=:#!":
            out.append("\\" + ch)
        elif code < 0x20 or code > 0x7E:
            if code > 0xFFFF:
                # Outside the BMP: two UTF-16 code units, as Java would hold the character.
                code -= 0x10000
                out.append(f"\\u{0xD800 + (code >> 10):04X}\\u{0xDC00 + (code & 0x3FF):04X}")
            else:
                out.append(f"\\u{code:04X}")
        else:
            out.append(ch)
    return "".join(out)


def _render(key: str, value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return ",".join(value)
    raise TypeError(f"cannot write {key}={value!r}: expected a string, number, bool or list")


def format_properties(mapping: Mapping[str, object], *, comments: Iterable[str] = ()) -> str:
    """Properties text for ``mapping`` such that ``parse_properties`` gives it back exactly.

    "Exactly" as Java strings: a high surrogate followed by a low one (two code points a Python
    string can hold) comes back as the one character the pair encodes, since UTF-16, and so
    the file, cannot tell them apart.

    Values that are not strings are written as Kafka expects them in a file: booleans as
    ``true``/``false``, numbers in decimal, lists of strings joined with commas. ``comments``
    become ``#`` lines at the top. Keys keep the mapping's order.
    """
    out: list[str] = []
    for comment in comments:
        out.extend(f"# {line}".rstrip() for line in comment.splitlines() or [""])
    for key, value in mapping.items():
        if not isinstance(key, str):
            raise TypeError(f"properties keys must be strings, got {key!r}")
        out.append(f"{_escape(key, is_key=True)}={_escape(_render(key, value), is_key=False)}")
    return "".join(line + "\n" for line in out)


# Command line ------------------------------------------------------------------------------------
def parse_overrides(args: Iterable[str]) -> dict[str, str]:
    """``--override key=value`` arguments, as Kafka's ``kafka-server-start`` takes them.

    The text is split at the first ``=`` (a value may contain more), nothing is trimmed or
    unescaped, and a later override of the same key wins. Unlike Kafka, which reads ``key`` or
    ``=value`` as an empty value or an empty key, both are refused: on a command line they are
    typing mistakes.
    """
    result: dict[str, str] = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep:
            raise ConfigError(f"--override {arg!r}: expected key=value")
        if not key:
            raise ConfigError(f"--override {arg!r}: the key is empty")
        result[key] = value
    return result


# Typed values (Kafka's ConfigDef) ----------------------------------------------------------------
class ConfigValueError(ConfigError):
    """A value Kafka's ``ConfigDef`` would refuse, in Kafka's words.

    ``key`` lets a caller that knows where the key was read (``ParsedProperties.location``) say
    which line to fix, and lets a caller that renamed keys (broker defaults -> topic keys) report
    the name the user wrote.
    """

    def __init__(self, key: str, value: object, reason: str) -> None:
        super().__init__(f"Invalid value {value!r} for configuration {key}: {reason}")
        self.key = key
        self.value = value
        self.reason = reason

    def __reduce__(self) -> tuple[type[ConfigValueError], tuple[str, object, str]]:
        return (type(self), (self.key, self.value, self.reason))


_INT_RE: Final = re.compile(r"[+-]?[0-9]+")
_DOUBLE_RE: Final = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1


def _java_trim(text: str) -> str:
    """``String.trim()``: drops characters up to U+0020 at both ends (not Unicode spaces)."""
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


def _parse_integer(key: str, raw: object, bits: int) -> int:
    kind = "INT" if bits == 32 else "LONG"
    lo, hi = (_INT_MIN, _INT_MAX) if bits == 32 else (_LONG_MIN, _LONG_MAX)
    if isinstance(raw, bool):
        raise ConfigValueError(key, raw, f"Expected value to be a {bits}-bit integer, not a bool")
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, str):
        # Integer.parseInt / Long.parseLong: ASCII digits with an optional sign; Python's int()
        # would also take "1_000" and non-ASCII digits.
        trimmed = _java_trim(raw)
        if not _INT_RE.fullmatch(trimmed):
            raise ConfigValueError(key, raw, f"Not a number of type {kind}")
        value = int(trimmed)
    else:
        raise ConfigValueError(
            key, raw, f"Expected a {bits}-bit integer, but it was a {type(raw).__name__}"
        )
    if not lo <= value <= hi:
        raise ConfigValueError(key, raw, f"Not a number of type {kind}")
    return value


def parse_int(key: str, raw: object) -> int:
    """A Kafka ``INT``: a 32-bit integer, from an ``int`` or a string of ASCII digits."""
    return _parse_integer(key, raw, 32)


def parse_long(key: str, raw: object) -> int:
    """A Kafka ``LONG``: a 64-bit integer, from an ``int`` or a string of ASCII digits."""
    return _parse_integer(key, raw, 64)


def parse_double(key: str, raw: object) -> float:
    """A Kafka ``DOUBLE``, finite (Kafka's ``Double.parseDouble`` also takes ``NaN``, which no
    range check then refuses; tierlog refuses it here)."""
    if isinstance(raw, bool):
        raise ConfigValueError(key, raw, "Expected value to be a double, not a bool")
    if isinstance(raw, int | float):
        value = float(raw)
    elif isinstance(raw, str):
        trimmed = _java_trim(raw)
        if not _DOUBLE_RE.fullmatch(trimmed):
            raise ConfigValueError(key, raw, "Not a number of type DOUBLE")
        value = float(trimmed)
    else:
        raise ConfigValueError(
            key, raw, f"Expected value to be a double, but it was a {type(raw).__name__}"
        )
    if not math.isfinite(value):
        raise ConfigValueError(key, raw, "Not a number of type DOUBLE")
    return value


def parse_bool(key: str, raw: object) -> bool:
    """A Kafka ``BOOLEAN``: ``true`` or ``false`` in any case, surrounding blanks ignored."""
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        trimmed = _java_trim(raw).lower()
        if trimmed in ("true", "false"):
            return trimmed == "true"
    raise ConfigValueError(key, raw, "Expected value to be either true or false")


def parse_string(key: str, raw: object) -> str:
    """A Kafka ``STRING``: trimmed, as ``ConfigDef`` trims it."""
    if not isinstance(raw, str):
        raise ConfigValueError(
            key, raw, f"Expected value to be a string, but it was a {type(raw).__name__}"
        )
    return _java_trim(raw)


def parse_list(key: str, raw: object) -> tuple[str, ...]:
    """A Kafka ``LIST``: comma-separated, blanks around commas dropped; empty text is ``()``.

    Empty items (``a,,b``) are kept as ``""``, as Kafka keeps them, for validators to refuse.
    """
    if isinstance(raw, list | tuple):
        if not all(isinstance(item, str) for item in raw):
            raise ConfigValueError(key, raw, "Expected a list of strings")
        return tuple(_java_trim(item) for item in raw)
    if not isinstance(raw, str):
        raise ConfigValueError(
            key, raw, f"Expected a comma-separated list, but it was a {type(raw).__name__}"
        )
    trimmed = _java_trim(raw)
    if not trimmed:
        return ()
    return tuple(re.split(r"\s*,\s*", trimmed))


def at_least(key: str, value: float, minimum: float) -> None:
    """Kafka's ``Range.atLeast``."""
    if value < minimum:
        raise ConfigValueError(key, value, f"Value must be at least {minimum}")


def between(key: str, value: float, minimum: float, maximum: float) -> None:
    """Kafka's ``Range.between`` (both ends included)."""
    at_least(key, value, minimum)
    if value > maximum:
        raise ConfigValueError(key, value, f"Value must be no more than {maximum}")


def non_empty(key: str, value: str | None) -> None:
    """Kafka's ``NonEmptyString``: unset is fine, an empty (or blank) string is not."""
    if value is not None and not value:
        raise ConfigValueError(key, value, "String must be non-empty")


# Key tables (Kafka's ConfigDef.define) -----------------------------------------------------------
KeyType = Literal["boolean", "int", "long", "double", "string", "list"]
"""Kafka's ``ConfigDef.Type`` of a key, in lower case (``PASSWORD``, ``CLASS`` and ``SHORT`` are
not used by tierlog)."""

_TYPE_WORDS: Final[Mapping[str, str]] = {
    "boolean": "a boolean",
    "int": "an integer",
    "long": "an integer",
    "double": "a finite number",
    "string": "a string",
    "list": "a tuple of strings",
}


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One key of a configuration: what ``ConfigDef.define`` says of it in Kafka.

    ``name`` is the key as written in a properties file; ``kind`` its type (``parse`` turns a
    text or a Python value into it); ``minimum``/``maximum``, ``non_empty`` and ``choices`` its
    validator (``check``: Kafka's ``Range.atLeast``/``between``, ``NonEmptyString``,
    ``ValidString.in``). ``optional`` says that ``None`` (unset) is a value, as for a key whose
    Kafka default is ``null``. ``default`` and ``doc`` document the key for tables and READMEs:
    ``default`` is text as a user would type it (or a parenthesised explanation such as
    ``(required)``), ``None`` when the configuration's dataclass field is the documentation.

    Checking is separate from parsing because configurations are also built from Python values
    (``LogConfig(segment_bytes=...)``), which must pass the same validator as a parsed text.
    """

    name: str
    kind: KeyType
    _: KW_ONLY
    minimum: float | None = None
    maximum: float | None = None
    optional: bool = False
    non_empty: bool = False
    choices: tuple[str, ...] = ()
    default: str | None = None
    doc: str = ""

    @property
    def attr(self) -> str:
        """The key in snake_case: the field that holds it in tierlog's configuration classes
        (``segment.bytes`` -> ``segment_bytes``), so a table needs no second column of names."""
        return self.name.replace(".", "_")

    def parse(self, raw: object) -> Any:
        """Kafka's ``ConfigDef.parseType``: ``raw`` (text from a file, or a typed value) as this
        key's type; ``ConfigValueError`` naming the key otherwise.

        A ``list`` drops empty items (``delete,`` is ``("delete",)``), as Kafka's list
        validators of topic keys do.
        """
        if raw is None and self.optional:
            return None
        if self.kind == "boolean":
            return parse_bool(self.name, raw)
        if self.kind == "int":
            return parse_int(self.name, raw)
        if self.kind == "long":
            return parse_long(self.name, raw)
        if self.kind == "double":
            return parse_double(self.name, raw)
        if self.kind == "list":
            return tuple(item for item in parse_list(self.name, raw) if item)
        return parse_string(self.name, raw)

    def check(self, value: object) -> None:
        """That ``value`` has this key's type and passes its validator (``ConfigValueError``).

        Integers are range-checked as Kafka's ``INT``/``LONG`` (a field set in Python to
        ``2**31`` could not be written to a properties file and read back).
        """
        if value is None and self.optional:
            return
        if self.kind == "boolean":
            ok = isinstance(value, bool)
        elif self.kind in ("int", "long"):
            ok = isinstance(value, int) and not isinstance(value, bool)
            if ok:
                self.parse(value)
        elif self.kind == "double":
            ok = isinstance(value, float) and math.isfinite(value)
        elif self.kind == "string":
            ok = isinstance(value, str)
        else:
            ok = isinstance(value, tuple) and all(isinstance(v, str) for v in value)
        if not ok:
            raise ConfigValueError(self.name, value, f"expected {_TYPE_WORDS[self.kind]}")
        if isinstance(value, str):
            if self.non_empty:
                non_empty(self.name, value)
            if self.choices and value not in self.choices:
                raise ConfigValueError(
                    self.name, value, f"String must be one of: {', '.join(self.choices)}"
                )
        elif isinstance(value, int | float) and not isinstance(value, bool):
            lowest = -math.inf if self.minimum is None else self.minimum
            highest = math.inf if self.maximum is None else self.maximum
            between(self.name, value, lowest, highest)


# Unknown keys ------------------------------------------------------------------------------------
def did_you_mean(key: str, known: Iterable[str]) -> str:
    """A hint for an unknown ``key``: `` (did you mean segment.bytes?)`` naming the closest of
    ``known`` when it is a near miss (``difflib`` ratio of at least 0.8), else ``""``.

    Kafka only says that a key is unknown; a transposed or dropped letter (``segmnet.bytes``,
    ``log.retention.hour``) is the usual cause, and naming the key meant saves a search through
    the documentation. The cutoff keeps keys that merely share words from being offered
    (``retention.hour`` gets no ``retention.ms``). Append the result to the message that
    reports the key.
    """
    matches = difflib.get_close_matches(key, sorted(set(known)), n=1, cutoff=0.8)
    return f" (did you mean {matches[0]}?)" if matches else ""
