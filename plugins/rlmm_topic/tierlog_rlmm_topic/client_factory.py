"""Building librdkafka clients from a configuration, with errors and logs tierlog's way.

librdkafka refuses an unknown or malformed property when a client is created, with a
``KafkaException`` whose text names the property; ``new_client`` turns that into a
``ConfigError`` so that a typo in ``server.properties`` fails ``configure`` with the usual
error type. librdkafka's own log lines (connection failures, retries) go to this module's
logger instead of stderr, so they follow the application's logging configuration.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from confluent_kafka import KafkaException

from tierlog.spi import ConfigError

__all__ = ["close_client", "new_client"]

_LOG = logging.getLogger(__name__)

_Client = TypeVar("_Client")


def new_client(
    factory: Callable[[dict[str, Any]], _Client], configs: Mapping[str, str], role: str
) -> _Client:
    """``factory(configs)`` (a confluent-kafka ``Producer``, ``Consumer`` or ``AdminClient``)
    with librdkafka's logs routed to Python logging; ``ConfigError`` if librdkafka refuses a
    property."""
    settings: dict[str, Any] = dict(configs)
    settings["logger"] = _LOG
    try:
        return factory(settings)
    except (KafkaException, ValueError, TypeError) as exc:
        raise ConfigError(
            f"librdkafka refused the RLMM {role}'s configuration: {exc}. Client keys are Java "
            "client keys (translated where librdkafka names them otherwise) or librdkafka's "
            "own: see the plugin's README"
        ) from exc


def close_client(client: object) -> None:
    """Close a client that has ``close`` (not every confluent-kafka release gives every
    client one); errors are logged, closing goes on."""
    close = getattr(client, "close", None)
    if close is None:
        return
    try:
        close()
    except Exception as exc:  # a failed close must not hide the caller's own outcome
        _LOG.warning("error while closing a librdkafka client: %s", exc)
