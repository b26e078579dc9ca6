"""Structured logging: JSON lines with the ``extra`` context, readable text, idempotent setup."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tierlog.logging_setup import configure_logging

TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture(autouse=True)
def restore_root_logger() -> Iterator[None]:
    """configure_logging changes the process-wide root logger: put it back after each test."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


def json_lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_carry_the_extra_fields() -> None:
    stream = io.StringIO()
    configure_logging("info", "json", stream)
    log = logging.getLogger("tierlog.rlm.manager")
    log.info(
        "Copied segment %s of %s",
        "abc",
        "orders-0",
        extra={
            "topic": "orders",
            "partition": 0,
            "segment_id": "abc",
            "offset": 1234,
            "path": Path("/data/x"),
        },
    )
    log.debug("not shown at INFO")
    (entry,) = json_lines(stream)
    assert entry["message"] == "Copied segment abc of orders-0"
    assert entry["level"] == "INFO"
    assert entry["logger"] == "tierlog.rlm.manager"
    assert entry["topic"] == "orders"
    assert entry["partition"] == 0
    assert entry["segment_id"] == "abc"
    assert entry["offset"] == 1234
    assert entry["path"] == "/data/x"  # not JSON-native: written with str()
    assert isinstance(entry["ts"], str)
    assert TS.match(entry["ts"])
    logged_at = datetime.strptime(entry["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    assert abs((datetime.now(UTC) - logged_at).total_seconds()) < 60
    assert "exc" not in entry


def test_json_carries_the_traceback_on_the_same_line() -> None:
    stream = io.StringIO()
    configure_logging("DEBUG", "json", stream)
    try:
        raise ValueError("bad segment")
    except ValueError:
        logging.getLogger("tierlog.test").exception("copy failed", extra={"partition": 3})
    (entry,) = json_lines(stream)  # one line despite the multi-line traceback
    assert entry["message"] == "copy failed"
    assert entry["level"] == "ERROR"
    assert entry["partition"] == 3
    assert isinstance(entry["exc"], str)
    assert "Traceback" in entry["exc"]
    assert "ValueError: bad segment" in entry["exc"]


def test_json_extra_cannot_hide_a_core_field() -> None:
    stream = io.StringIO()
    configure_logging("INFO", "json", stream)
    logging.getLogger("tierlog.test").warning("hello", extra={"level": "fake", "ts": 0})
    (entry,) = json_lines(stream)
    assert entry["level"] == "WARNING"
    assert entry["extra_level"] == "fake"
    assert entry["extra_ts"] == 0


def test_text_is_one_readable_line_with_key_values() -> None:
    stream = io.StringIO()
    configure_logging("INFO", "text", stream)
    logging.getLogger("tierlog.rlm").info(
        "Deleting remote segment",
        extra={"topic": "orders", "partition": 2, "reason": "retention ms"},
    )
    (line,) = stream.getvalue().splitlines()
    timestamp, level, rest = line.split(" ", 2)
    assert TS.match(timestamp)
    assert level == "INFO"
    assert rest.endswith(
        'tierlog.rlm: Deleting remote segment topic=orders partition=2 reason="retention ms"'
    )


def test_text_puts_the_traceback_below_the_line() -> None:
    stream = io.StringIO()
    configure_logging("INFO", "text", stream)
    try:
        raise OSError("disk gone")
    except OSError:
        logging.getLogger("tierlog.test").error("read failed", exc_info=True)
    first, *rest = stream.getvalue().splitlines()
    assert first.endswith("tierlog.test: read failed")
    assert rest[0].startswith("Traceback")
    assert rest[-1] == "OSError: disk gone"


def test_configuring_twice_keeps_one_handler() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging("INFO", "text", first)
    configure_logging("INFO", "json", second)
    ours = [h for h in logging.getLogger().handlers if getattr(h, "_tierlog_handler", False)]
    assert len(ours) == 1
    logging.getLogger("tierlog.test").info("once")
    assert first.getvalue() == ""  # the first handler is gone
    assert [e["message"] for e in json_lines(second)] == ["once"]


def test_other_handlers_are_left_alone() -> None:
    foreign = logging.StreamHandler(io.StringIO())
    root = logging.getLogger()
    root.addHandler(foreign)
    try:
        configure_logging("INFO", "text", io.StringIO())
        configure_logging("INFO", "text", io.StringIO())
        assert foreign in root.handlers
    finally:
        root.removeHandler(foreign)


@pytest.mark.parametrize(
    ("name", "level"),
    [("debug", logging.DEBUG), ("WARN", logging.WARNING), ("error", logging.ERROR), ("15", 15)],
)
def test_level_names(name: str, level: int) -> None:
    configure_logging(name, "text", io.StringIO())
    assert logging.getLogger().level == level


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="log level"):
        configure_logging("loud", "text", io.StringIO())
    with pytest.raises(ValueError, match="fmt"):
        configure_logging("INFO", "yaml", io.StringIO())  # type: ignore[arg-type]
