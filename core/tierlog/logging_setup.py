"""Process-wide logging for tierlog nodes and tools: readable text or one JSON object per line.

tierlog's modules log through ``logging.getLogger(__name__)`` and attach context with ``extra``
(``topic``, ``partition``, ``segment_id``, ``offset``...), so a log pipeline can filter on a
partition without parsing messages. ``configure_logging`` installs one handler on the root logger
that renders those fields:

- ``json``: ``{"ts": "2024-05-01T12:00:00.123Z", "level": "INFO", "logger": "...", "thread":
  "...", "message": "...", <extra fields>, "exc": "<traceback>"}``, one object per line, so
  collectors (Loki, Elasticsearch, CloudWatch...) ingest it without a parsing rule;
- ``text``: ``2024-05-01T12:00:00.123Z INFO  [thread] logger: message key=value ...`` with any
  traceback on the following lines.

Timestamps are ISO 8601 in UTC with milliseconds, so lines from several nodes sort together.
Calling it again replaces its own handler instead of adding a second one (every line would
otherwise be printed twice); handlers installed by others (pytest, an embedding application)
are left alone.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

__all__ = ["JsonFormatter", "TextFormatter", "configure_logging", "extra_fields"]

LogFormat = Literal["text", "json"]

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_RECORD_ATTRIBUTES = frozenset(
    logging.LogRecord("", logging.INFO, "", 0, "", None, None).__dict__
) | {"message", "asctime", "taskName"}

_JSON_CORE_KEYS = frozenset({"ts", "level", "logger", "thread", "message", "exc", "stack"})

_HANDLER_MARK = "_tierlog_handler"


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a caller attached with ``extra=``, in the order they were given."""
    return {k: v for k, v in record.__dict__.items() if k not in _RECORD_ATTRIBUTES}


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(record.msecs):03d}Z"


def _exception_text(record: logging.LogRecord) -> str | None:
    if record.exc_info and record.exc_info[0] is not None:
        return "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
    if record.exc_text:
        return record.exc_text
    return None


class JsonFormatter(logging.Formatter):
    """One JSON object per record; values JSON cannot encode are written with ``str()``.

    An extra field named like a core key (``ts``, ``level``...) is written as ``extra_<name>``
    so it cannot hide the real value.
    """

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "thread": record.threadName,
            "message": record.getMessage(),
        }
        for key, value in extra_fields(record).items():
            entry[f"extra_{key}" if key in _JSON_CORE_KEYS else key] = value
        exc = _exception_text(record)
        if exc is not None:
            entry["exc"] = exc
        if record.stack_info:
            entry["stack"] = record.stack_info
        return json.dumps(entry, default=str, ensure_ascii=False)


def _logfmt_value(value: object) -> str:
    text = str(value)
    if text == "" or any(c.isspace() or c in '"=' for c in text):
        return json.dumps(text, ensure_ascii=False)
    return text


class TextFormatter(logging.Formatter):
    """``<ts> <LEVEL> [<thread>] <logger>: <message> k=v ...`` and the traceback, if any."""

    def format(self, record: logging.LogRecord) -> str:
        line = (
            f"{_timestamp(record)} {record.levelname:<5} [{record.threadName}] "
            f"{record.name}: {record.getMessage()}"
        )
        extras = extra_fields(record)
        if extras:
            line += " " + " ".join(f"{k}={_logfmt_value(v)}" for k, v in extras.items())
        exc = _exception_text(record)
        if exc is not None:
            line += "\n" + exc
        if record.stack_info:
            line += "\n" + record.stack_info
        return line


def _parse_level(level: str) -> int:
    name = level.strip().upper()
    if name == "WARN":
        name = "WARNING"
    if name.isdigit():
        return int(name)
    value = logging.getLevelNamesMapping().get(name)
    if value is None:
        raise ValueError(f"unknown log level {level!r}")
    return value


def configure_logging(
    level: str = "INFO", fmt: LogFormat = "text", stream: TextIO | None = None
) -> logging.Handler:
    """Send all logging to ``stream`` (``sys.stderr`` at call time when None) in ``fmt``.

    ``level`` is a level name (``debug``, ``INFO``, ``warn``...) or number and is set on the
    root logger. Idempotent: the handler of a previous call is removed first. Returns the
    installed handler.
    """
    if fmt not in ("text", "json"):
        raise ValueError(f"fmt must be 'text' or 'json', not {fmt!r}")
    numeric_level = _parse_level(level)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    setattr(handler, _HANDLER_MARK, True)
    root = logging.getLogger()
    for previous in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(previous)
        previous.close()
    root.addHandler(handler)
    root.setLevel(numeric_level)
    return handler
