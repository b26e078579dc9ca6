"""Building librdkafka clients from a configuration, with errors and logs tierlog's way.

librdkafka refuses an unknown or malformed property when a client is created, with a
``KafkaException`` whose text names the property; ``new_client`` turns that into a
``ConfigError`` so that a typo in ``server.properties`` fails ``configure`` with the usual
error type. librdkafka's own log lines (connection failures, retries) go to this module's
logger instead of stderr, so they follow the application's logging configuration.

librdkafka reports each failed reconnection to a broker that is down, at ERROR level, several
times a second. The RLMM waits such outages out (nothing is lost), so ``LibrdkafkaLog`` logs
them as WARNINGs, at most one per client and kind of message every 30 seconds, with the number
of lines left out.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

from confluent_kafka import KafkaException

from tierlog.spi import ConfigError

__all__ = ["LibrdkafkaLog", "close_aside", "close_client", "new_client", "own_client_patience_s"]

_LOG = logging.getLogger(__name__)

_Client = TypeVar("_Client")

_REPEAT_INTERVAL_S: Final = 30.0


class LibrdkafkaLog:
    """What confluent-kafka calls for each librdkafka log line (``log(level, "%s [%s] %s",
    facility, client, message)``): this module's logger, ERROR demoted to WARNING, repeats of
    a (client, facility) at WARNING or above limited to one per 30 s."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._last: dict[tuple[object, ...], tuple[float, int]] = {}

    def log(self, level: int, msg: str, *args: object) -> None:
        level = min(level, logging.WARNING)
        if level < logging.WARNING or not _LOG.isEnabledFor(level):
            _LOG.log(level, msg, *args)
            return
        key = tuple(args[:2])
        now = self._monotonic()
        with self._lock:
            last, skipped = self._last.get(key, (None, 0))
            if last is not None and now - last < _REPEAT_INTERVAL_S:
                self._last[key] = (last, skipped + 1)
                return
            self._last[key] = (now, 0)
        if skipped:
            _LOG.log(level, msg + " (%d similar line(s) left out)", *args, skipped)
        else:
            _LOG.log(level, msg, *args)


def new_client(
    factory: Callable[[dict[str, Any]], _Client], configs: Mapping[str, str], role: str
) -> _Client:
    """``factory(configs)`` (a confluent-kafka ``Producer``, ``Consumer`` or ``AdminClient``)
    with librdkafka's logs routed to Python logging; ``ConfigError`` if librdkafka refuses a
    property."""
    settings: dict[str, Any] = dict(configs)
    settings["logger"] = LibrdkafkaLog()
    try:
        return factory(settings)
    except (KafkaException, ValueError, TypeError) as exc:
        raise ConfigError(
            f"librdkafka refused the RLMM {role}'s configuration: {exc}. Client keys are Java "
            "client keys (translated where librdkafka names them otherwise) or librdkafka's "
            "own: see the plugin's README"
        ) from exc


CLOSE_TIMEOUT_S: Final = 10.0
"""How long ``close_client`` waits for a client to close."""


def close_client(client: object, timeout: float = CLOSE_TIMEOUT_S) -> None:
    """Close a client that has ``close`` (not every confluent-kafka release gives every
    client one); errors are logged, closing goes on. The close runs on a daemon thread and is
    waited for ``timeout`` seconds at most: a client that lost its brokers for good
    (librdkafka#5301) never finishes closing (a producer's close aborts its transaction and
    flushes, with no timeout of its own), and the RLMM's close must not hang on it."""
    close = getattr(client, "close", None)
    if close is None:
        return

    def run() -> None:
        try:
            close()
        except Exception as exc:  # a failed close must not hide the caller's own outcome
            _LOG.warning("error while closing a librdkafka client: %s", exc)

    closing = threading.Thread(target=run, name="rlmm-client-close", daemon=True)
    closing.start()
    closing.join(timeout)
    if closing.is_alive():
        _LOG.warning(
            "a librdkafka client (%s) did not finish closing within %.0f s (it may have lost "
            "its brokers: librdkafka#5301); it is left to finish on its own",
            type(client).__name__,
            timeout,
        )


def close_aside(client: object) -> None:
    """``close_client`` on a daemon thread, not waited for: a replaced client that lost its
    brokers may take the whole bounded wait, which the caller's thread must not spend."""
    threading.Thread(
        target=close_client, args=(client,), name="rlmm-client-close-aside", daemon=True
    ).start()


_OWN_METADATA_S: Final = 15.0


def own_client_patience_s(configs: Mapping[str, str]) -> float:
    """How long a client suspected of having lost its brokers (librdkafka#5301) may take to
    answer: longer than its longest reconnect backoff (``reconnect.backoff.max.ms``, 10 s by
    default), so a client merely waiting to reconnect after an outage answers in time."""
    try:
        backoff_s = int(configs.get("reconnect.backoff.max.ms", "10000")) / 1000
    except ValueError:
        backoff_s = 10.0
    return max(_OWN_METADATA_S, backoff_s + 5.0)
