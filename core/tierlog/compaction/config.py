"""The log cleaner's node-level configuration: Kafka's ``log.cleaner.*`` keys and tierlog's own.

Kafka's keys keep their meaning where tierlog's cleaner has the same knob:

- ``log.cleaner.enable`` (true): run the cleaner on compacted topics;
- ``log.cleaner.threads`` (1): partitions cleaned at once (each round is one partition, one job);
- ``log.cleaner.backoff.ms`` (15000): the sleep when no log was eligible.

``log.cleaner.dedupe.buffer.size``, ``log.cleaner.io.buffer.size``,
``log.cleaner.io.buffer.load.factor`` and ``log.cleaner.io.max.bytes.per.second`` are accepted
(a Kafka ``server.properties`` sets them) and have no effect: tierlog's offset map has no fixed
buffer (a round always covers the whole dirty range) and its reads are not throttled. The
topic-level defaults (``log.cleaner.min.cleanable.ratio``, ``log.cleaner.delete.retention.ms``,
``log.cleaner.min/max.compaction.lag.ms``) belong to ``tierlog.log.log_config``.

tierlog's own keys, for compaction through remote storage:

- ``remote.log.compaction.engine`` (``auto``): ``spark`` runs each round as a Spark job
  (``tierlog[spark]``, on ``remote.log.compaction.spark.master``, default ``local[*]``; see
  ``spark_session``), ``python`` in the node's process; ``auto`` is Spark when pyspark is
  installed, else the node's process;
- ``remote.log.compaction.bloom.filter.fpp`` (0.01, in (0, 1)): the highest false-positive rate
  per key of the Bloom filter kept with each cleaned remote segment;
- ``remote.log.compaction.bloom.filter.size.ratio`` (0.01, in [0, 1)): the filter's floor as a
  share of its segment's bytes (the KIP's ~1-2% overhead budget): a filter gets that many bits
  when the rate needs fewer, which lowers the rate (``summary.bloom_shape``); 0 sizes by the rate
  alone;
- ``remote.log.compaction.scratch.dir`` (the system's temporary directory): where remote
  segments are downloaded and cleaned segments written before upload;
- ``remote.log.compaction.superseded.delete.delay.ms`` (60000): how long a segment replaced by a
  cleaned one stays in remote storage before the expiration task deletes it (Kafka's
  ``file.delete.delay.ms`` for swapped-out local segments plays the same part): a reader that
  looked it up just before the swap still finds it, and a zombie leader has that long to learn
  it lost leadership before acting on its own view.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from tierlog.compaction.spark_session import PREFIX as SPARK_PREFIX
from tierlog.compaction.spark_session import SparkSettings
from tierlog.properties import ConfigKey, ConfigValueError

__all__ = ["KEYS", "CleanerConfig"]

KEYS: Final = (
    ConfigKey("log.cleaner.enable", "boolean", default="true"),
    ConfigKey("log.cleaner.threads", "int", minimum=1, default="1"),
    ConfigKey("log.cleaner.backoff.ms", "long", minimum=0, default="15000"),
    ConfigKey("log.cleaner.dedupe.buffer.size", "long", default="134217728"),
    ConfigKey("log.cleaner.io.buffer.size", "int", minimum=0, default="524288"),
    ConfigKey("log.cleaner.io.buffer.load.factor", "double", default="0.9"),
    ConfigKey("log.cleaner.io.max.bytes.per.second", "double", default="1.7976931348623157E308"),
    ConfigKey(
        "remote.log.compaction.engine",
        "string",
        choices=("auto", "spark", "python"),
        default="auto",
    ),
    ConfigKey(
        "remote.log.compaction.bloom.filter.fpp", "double", minimum=0, maximum=1, default="0.01"
    ),
    ConfigKey(
        "remote.log.compaction.bloom.filter.size.ratio",
        "double",
        minimum=0,
        maximum=1,
        default="0.01",
    ),
    ConfigKey("remote.log.compaction.scratch.dir", "string", optional=True, non_empty=True),
    ConfigKey(
        "remote.log.compaction.superseded.delete.delay.ms", "long", minimum=0, default="60000"
    ),
)
_BY_NAME: Final = {k.name: k for k in KEYS}
_OPEN_ENDS: Final = {
    "remote.log.compaction.bloom.filter.fpp": (True, True),
    "remote.log.compaction.bloom.filter.size.ratio": (False, True),
}
"""Keys whose range excludes an end (lower, upper): Kafka's ``Range`` includes both, so these
are checked after it (a rate of 0 or 1, a filter as large as its segment, mean nothing)."""


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """See the module docstring."""

    log_cleaner_enable: bool = True
    log_cleaner_threads: int = 1
    log_cleaner_backoff_ms: int = 15_000
    log_cleaner_dedupe_buffer_size: int = 128 * 1024 * 1024
    log_cleaner_io_buffer_size: int = 512 * 1024
    log_cleaner_io_buffer_load_factor: float = 0.9
    log_cleaner_io_max_bytes_per_second: float = 1.7976931348623157e308
    remote_log_compaction_engine: str = "auto"
    remote_log_compaction_bloom_filter_fpp: float = 0.01
    remote_log_compaction_bloom_filter_size_ratio: float = 0.01
    remote_log_compaction_scratch_dir: str | None = None
    remote_log_compaction_superseded_delete_delay_ms: int = 60_000
    spark: SparkSettings = field(default_factory=SparkSettings)

    def __post_init__(self) -> None:
        for key in KEYS:
            key.check(getattr(self, key.attr))
        for name, (low_open, high_open) in _OPEN_ENDS.items():
            key = _BY_NAME[name]
            value = getattr(self, key.attr)
            if (low_open and value == key.minimum) or (high_open and value == key.maximum):
                low, high = "(" if low_open else "[", ")" if high_open else "]"
                raise ConfigValueError(
                    name, value, f"Value must be in {low}{key.minimum}, {key.maximum}{high}"
                )

    @classmethod
    def from_props(cls, props: Mapping[str, object]) -> CleanerConfig:
        """The cleaner's keys of a node configuration (other keys are ignored here)."""
        kwargs = {
            _BY_NAME[name].attr: _BY_NAME[name].parse(raw)
            for name, raw in props.items()
            if name in _BY_NAME
        }
        spark = SparkSettings.from_props(
            {k: v for k, v in props.items() if k.startswith(SPARK_PREFIX)}
        )
        return cls(**kwargs, spark=spark)

    @staticmethod
    def recognizes(key: str) -> bool:
        return key in _BY_NAME or key.startswith(SPARK_PREFIX)

    @property
    def engine(self) -> str:
        """``spark`` or ``python``: ``auto`` resolved by whether pyspark is installed."""
        if self.remote_log_compaction_engine != "auto":
            return self.remote_log_compaction_engine
        return "spark" if importlib.util.find_spec("pyspark") is not None else "python"
