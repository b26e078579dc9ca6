"""How tierlog gets the Spark session its compaction jobs run on (``tierlog[spark]``).

Compaction runs on ``local[*]`` by default, so it works with nothing but the extra installed, and
on any cluster Spark reaches (``spark://``, ``yarn``, ``k8s://``) through configuration, with the
same Java-properties keys as the rest of tierlog:

- ``remote.log.compaction.spark.master``: the master URL (default ``local[*]``);
- ``remote.log.compaction.spark.app.name``: the application's name (default
  ``tierlog-compaction``), as a cluster's UI lists it;
- ``remote.log.compaction.spark.conf.<spark key>``: any Spark setting, passed through as it is
  (``remote.log.compaction.spark.conf.spark.executor.memory=2g``). Spark, not tierlog, knows its
  keys, so the only check is that the key is one (``spark.``...).

``SparkSettings.from_props`` reads those keys; ``spark_session`` starts (or joins) the session.
What ``spark_session`` adds to the caller's settings, each unless the caller set the key:

- executors run this interpreter (``PYSPARK_PYTHON`` and ``PYSPARK_DRIVER_PYTHON`` set to
  ``sys.executable`` when unset): Spark's default is ``python3`` from ``PATH``, which is not the
  virtualenv that has tierlog, and every task would fail to import it;
- a local master, or a standalone master on loopback, keeps the driver on 127.0.0.1 (bind and
  advertised address, and ``SPARK_LOCAL_IP`` while the JVM starts): nothing listens on other
  interfaces, and a host whose name resolves to a loopback address gets no warning;
- no web UI and no console progress bar: tierlog reports its own progress, and a UI port per
  job is a port nobody asked for; ``spark.ui.enabled=true`` brings the UI back;
- ``spark.sql.shuffle.partitions`` of twice the threads of a local master (Spark's 200 are
  empty tasks on a laptop); a cluster master keeps Spark's default, which adaptive execution
  coalesces, unless set;
- Arrow for the conversions between Spark and pandas.

pyspark is imported only when a session is asked for: importing ``tierlog.compaction`` (and this
module) works without the extra, and the first call without it raises ``SparkUnavailableError``
saying what to install. Spark allows one running ``SparkContext`` per process (it lives in the
JVM that pyspark starts with the first session and keeps until the process exits, so JVM options
such as ``spark.driver.extraJavaOptions`` only apply to that first session):
``spark_session`` returns the running one when it is on the same master, and refuses to
silently hand back a session on another master; ``stop_spark_session`` ends it first.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

from tierlog.properties import did_you_mean, parse_string
from tierlog.spi import ConfigError, IllegalStateError, TierlogError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "APP_NAME_KEY",
    "CONF_PREFIX",
    "DEFAULT_APP_NAME",
    "DEFAULT_MASTER",
    "MASTER_KEY",
    "PREFIX",
    "SparkSettings",
    "SparkUnavailableError",
    "is_loopback_master",
    "local_threads",
    "spark_session",
    "stop_spark_session",
]

_LOG = logging.getLogger(__name__)

PREFIX: Final = "remote.log.compaction.spark."
MASTER_KEY: Final = PREFIX + "master"
APP_NAME_KEY: Final = PREFIX + "app.name"
CONF_PREFIX: Final = PREFIX + "conf."
_KNOWN_KEYS: Final = (MASTER_KEY, APP_NAME_KEY)

DEFAULT_MASTER: Final = "local[*]"
DEFAULT_APP_NAME: Final = "tierlog-compaction"
INSTALL_HINT: Final = "install tierlog's Spark extra: pip install 'tierlog[spark]'"

_LOCAL_RE: Final = re.compile(r"local(?:\[(\*|[1-9][0-9]*)(?:,\s*[1-9][0-9]*)?\])?")
"""``local``, ``local[N]``, ``local[*]``, and either with a task-failure count (``local[4,2]``)."""
_LOCAL_CLUSTER_RE: Final = re.compile(
    r"local-cluster\[\s*[1-9][0-9]*\s*,\s*[1-9][0-9]*\s*,\s*[1-9][0-9]*\s*\]"
)
_SPARK_RE: Final = re.compile(
    r"spark://(?:[^\s,:/]+|\[[0-9A-Fa-f:.]+\]):[0-9]+(?:,(?:[^\s,:/]+|\[[0-9A-Fa-f:.]+\]):[0-9]+)*"
)
_LOOPBACK_HOSTS: Final = frozenset({"127.0.0.1", "localhost", "[::1]"})

_RESERVED_CONF: Final[Mapping[str, str]] = {
    "spark.master": MASTER_KEY,
    "spark.app.name": APP_NAME_KEY,
}
"""Spark keys with a tierlog key of their own: given twice they could disagree."""
_CONNECT_CONF: Final = ("spark.remote", "spark.api.mode")

_START_LOCK = threading.Lock()


class SparkUnavailableError(TierlogError):
    """Spark cannot run here: pyspark (``tierlog[spark]``) is not installed, or its JVM did not
    start (no Java 17 or later)."""


def local_threads(master: str) -> int | None:
    """The worker threads of a local master (``local[*]``: this machine's CPUs), ``None`` for a
    cluster master."""
    match = _LOCAL_RE.fullmatch(master)
    if match is None:
        return None
    count = match.group(1)
    if count is None:
        return 1
    if count == "*":
        return os.cpu_count() or 1
    return int(count)


def is_loopback_master(master: str) -> bool:
    """Whether the driver only ever talks to this machine's loopback: a local master (also
    ``local-cluster``), or standalone masters all on 127.0.0.1/localhost."""
    if _LOCAL_RE.fullmatch(master) or _LOCAL_CLUSTER_RE.fullmatch(master):
        return True
    if not _SPARK_RE.fullmatch(master):
        return False
    hosts = [address.rpartition(":")[0] for address in master[len("spark://") :].split(",")]
    return all(host in _LOOPBACK_HOSTS for host in hosts)


def _check_master(key: str, master: str) -> None:
    """Refuse what Spark could not parse, at configuration time and naming the key (Spark says
    ``Could not parse Master URL`` only when the session starts). Masters of other schemes
    (``yarn``, ``k8s://``, a plugged-in cluster manager) are Spark's to judge."""
    reason = None
    if not master:
        reason = f"the master URL is empty (e.g. {DEFAULT_MASTER}, spark://HOST:PORT, yarn)"
    elif any(c.isspace() for c in master):
        reason = "a master URL has no blanks"
    elif master.startswith("local-cluster"):
        if not _LOCAL_CLUSTER_RE.fullmatch(master):
            reason = "expected local-cluster[WORKERS,CORES,MEMORY_MB]"
    elif master.startswith("local"):
        if not _LOCAL_RE.fullmatch(master):
            reason = "expected local, local[N], local[*] or local[N,MAX_FAILURES] (N at least 1)"
    elif master.startswith("spark://") and not _SPARK_RE.fullmatch(master):
        reason = "expected spark://HOST:PORT, or several HOST:PORT separated by commas"
    if reason is not None:
        raise ConfigError(f"Invalid value {master!r} for configuration {key}: {reason}")


def _check_conf_key(key: str, spark_key: str) -> None:
    if not spark_key.startswith("spark.") or spark_key == "spark.":
        raise ConfigError(
            f"{key}: {spark_key!r} is not a Spark setting (Spark's keys start with 'spark.', "
            f"e.g. {CONF_PREFIX}spark.executor.memory=2g); Spark would ignore it"
        )
    if spark_key in _RESERVED_CONF:
        raise ConfigError(f"{key}: set {_RESERVED_CONF[spark_key]} instead")
    if spark_key in _CONNECT_CONF:
        raise ConfigError(
            f"{key}: tierlog's compaction needs a classic Spark session (its jobs use the "
            "SparkContext), not Spark Connect"
        )


@dataclass(frozen=True)
class SparkSettings:
    """Where and how compaction jobs run: a Spark master, an application name, and Spark
    settings passed through to the session (``conf``, Spark's own keys).

    Built from tierlog's keys with ``from_props``, or directly; either way the same checks run
    (``ConfigError`` naming the key). ``conf`` is copied into a read-only mapping.
    """

    master: str = DEFAULT_MASTER
    app_name: str = DEFAULT_APP_NAME
    conf: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), hash=False)

    def __post_init__(self) -> None:
        _check_master(MASTER_KEY, self.master)
        if not self.app_name.strip():
            raise ConfigError(
                f"Invalid value {self.app_name!r} for configuration {APP_NAME_KEY}: "
                "String must be non-empty"
            )
        conf = dict(self.conf)
        for spark_key, value in conf.items():
            key = CONF_PREFIX + spark_key
            if not isinstance(spark_key, str) or not isinstance(value, str):
                raise ConfigError(f"{key}: Spark settings are strings, got {value!r}")
            _check_conf_key(key, spark_key)
        object.__setattr__(self, "conf", MappingProxyType(conf))

    @classmethod
    def from_props(cls, props: Mapping[str, object]) -> SparkSettings:
        """The settings under ``remote.log.compaction.spark.`` in ``props`` (other keys are
        someone else's and ignored). Values are trimmed, as Kafka trims a string; a key under
        the prefix that is neither ``master``, ``app.name`` nor ``conf.<spark key>`` is refused
        with a hint, since it would otherwise be dropped silently."""
        master, app_name = DEFAULT_MASTER, DEFAULT_APP_NAME
        conf: dict[str, str] = {}
        unknown = []
        for key, raw in props.items():
            if not key.startswith(PREFIX):
                continue
            if key == MASTER_KEY:
                master = parse_string(key, raw)
                _check_master(key, master)
            elif key == APP_NAME_KEY:
                app_name = parse_string(key, raw)
            elif key.startswith(CONF_PREFIX):
                spark_key = key[len(CONF_PREFIX) :]
                _check_conf_key(key, spark_key)
                conf[spark_key] = parse_string(key, raw)
            else:
                unknown.append(key)
        if unknown:
            keys = ", ".join(key + did_you_mean(key, _KNOWN_KEYS) for key in sorted(unknown))
            raise ConfigError(
                f"Unknown configuration {keys}: the keys under {PREFIX} are {MASTER_KEY}, "
                f"{APP_NAME_KEY} and {CONF_PREFIX}<spark key> (e.g. "
                f"{CONF_PREFIX}spark.executor.memory=2g)"
            )
        return cls(master=master, app_name=app_name, conf=conf)

    def spark_conf(self) -> dict[str, str]:
        """Every Spark setting ``spark_session`` gives the builder: tierlog's defaults (see the
        module's documentation), then ``conf`` over them."""
        defaults = {
            "spark.api.mode": "classic",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.execution.arrow.pyspark.enabled": "true",
        }
        if is_loopback_master(self.master):
            defaults["spark.driver.host"] = "127.0.0.1"
            defaults["spark.driver.bindAddress"] = "127.0.0.1"
        threads = local_threads(self.master)
        if threads is not None:
            defaults["spark.sql.shuffle.partitions"] = str(2 * threads)
        return defaults | dict(self.conf)


def _import_pyspark() -> type[SparkSession]:
    try:
        import pyarrow  # noqa: F401  (mapInArrow and the Arrow conversions need it)
        from pyspark.sql import SparkSession
    except ImportError as e:
        raise SparkUnavailableError(f"Spark is not available ({e}): {INSTALL_HINT}") from e
    return SparkSession


@contextmanager
def _jvm_environment(settings: SparkSettings) -> Iterator[None]:
    """The environment the driver's JVM starts with: this interpreter for Python workers and,
    for a loopback master, ``SPARK_LOCAL_IP`` (restored afterwards: only the JVM reads it)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    added = is_loopback_master(settings.master) and "SPARK_LOCAL_IP" not in os.environ
    if added:
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    try:
        yield
    finally:
        if added:
            os.environ.pop("SPARK_LOCAL_IP", None)


def _running_master() -> str | None:
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    return None if context is None else context.master


def spark_session(settings: SparkSettings | None = None) -> SparkSession:
    """The process's Spark session on ``settings.master`` (default: ``SparkSettings()``,
    ``local[*]``), started if none runs.

    A session already running on the same master is returned as it is (Spark applies the
    runtime SQL settings of ``settings`` to it and ignores the others); one on another master
    raises ``IllegalStateError``: handing it back would run the job somewhere the caller did not
    ask for. ``SparkUnavailableError`` when pyspark is not installed or its JVM cannot start.
    """
    settings = settings or SparkSettings()
    session_class = _import_pyspark()
    if "SPARK_REMOTE" in os.environ:
        raise ConfigError(
            "SPARK_REMOTE is set: tierlog's compaction needs a classic Spark session (its jobs "
            "use the SparkContext), not Spark Connect; unset it"
        )
    from pyspark.errors import PySparkRuntimeError

    with _START_LOCK:
        running = _running_master()
        if running is not None and running != settings.master:
            raise IllegalStateError(
                f"a Spark session on master {running} is already running in this process; "
                f"stop it (stop_spark_session()) before starting one on {settings.master}"
            )
        builder = session_class.builder.master(settings.master).appName(settings.app_name)
        for key, value in settings.spark_conf().items():
            builder = builder.config(key, value)
        try:
            with _jvm_environment(settings):
                session = builder.getOrCreate()
        except PySparkRuntimeError as e:
            if e.getCondition() == "JAVA_GATEWAY_EXITED":
                java_home = os.environ.get("JAVA_HOME")
                where = f"JAVA_HOME={java_home}" if java_home else "`java` on PATH"
                raise SparkUnavailableError(
                    f"Spark's JVM did not start (Spark needs Java 17 or later; looked for "
                    f"{where}): {e}"
                ) from e
            raise
    if running is None:
        _LOG.info(
            "Spark session started: master %s, application %s, Spark %s",
            settings.master,
            settings.app_name,
            session.version,
        )
    return session


def stop_spark_session() -> None:
    """Stop the process's Spark session, if one runs (the JVM stays, for the next session);
    a no-op without pyspark."""
    try:
        from pyspark import SparkContext
        from pyspark.sql import SparkSession
    except ImportError:
        return
    with _START_LOCK:
        session = SparkSession.getActiveSession()
        if session is not None:
            session.stop()
        context = SparkContext._active_spark_context
        if context is not None:
            context.stop()
