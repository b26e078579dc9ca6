"""The ``rlmm.config.`` keys of the ``topic`` RLMM: Kafka's TBRLMM keys, as Kafka names them.

A Kafka broker's ``rlmm.config.*`` block works unchanged: the topic keys
(``remote.log.metadata.topic.num.partitions``, ``.replication.factor``, ``.retention.ms``,
``.min.isr``), the read-your-writes wait (``remote.log.metadata.consume.wait.ms``), the
initialization retries, and the client prefixes ``remote.log.metadata.common.client.``,
``remote.log.metadata.producer.``, ``remote.log.metadata.consumer.`` and
``remote.log.metadata.admin.`` (a producer/consumer/admin key overrides the common one, as in
Kafka's ``TopicBasedRemoteLogMetadataManagerConfig``). ``node.id`` (or the deprecated
``broker.id``) is required, as in Kafka: it names the clients. ``log.dir`` and ``cluster.id``,
which the RemoteLogManager adds, are accepted.

Two keys are tierlog's own: ``remote.log.metadata.topic.name`` (default
``__remote_log_metadata``; Kafka hard-codes the name, tierlog lets tests and side-by-side
deployments use another topic, and the compacted RLMM reuses the key), and
``remote.log.metadata.consume.stall.timeout.ms`` (default 30 s: when the consumer task
replaces a consumer that stopped reading a metadata partition; see ``consumer``).

The client properties are Java client keys; ``clients.translate`` turns them into librdkafka's,
and the settings TBRLMM forces are applied on top (``acks=all`` and idempotence for the
producer, no auto commit and ``auto.offset.reset=earliest`` for the consumer, the client ids
``__remote_log_metadata_client_<nodeId>_producer``/``_consumer``/``_admin``). Unknown keys are
reported in a WARNING, with a "did you mean" for near misses, as the embedded RLMM does: Kafka
passes through keys it does not know, so a file written for it must not fail here.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Final

from tierlog.properties import ConfigKey, did_you_mean
from tierlog.spi import ConfigError
from tierlog_rlmm_topic.clients import translate

__all__ = [
    "ADMIN_PREFIX",
    "BROKER_ID",
    "CLUSTER_ID",
    "COMMON_CLIENT_PREFIX",
    "CONFIG_KEYS",
    "CONSUMER_PREFIX",
    "CONSUME_STALL_TIMEOUT_MS",
    "CONSUME_WAIT_MS",
    "DEFAULT_TOPIC_NAME",
    "INIT_RETRY_INTERVAL_MS",
    "INIT_RETRY_MAX_TIMEOUT_MS",
    "LOG_DIR",
    "MIN_ISR",
    "NODE_ID",
    "NUM_PARTITIONS",
    "PRODUCER_PREFIX",
    "REPLICATION_FACTOR",
    "RETENTION_MS",
    "TOPIC_NAME",
    "TopicRlmmConfig",
]

_LOG = logging.getLogger(__name__)

NUM_PARTITIONS: Final = "remote.log.metadata.topic.num.partitions"
REPLICATION_FACTOR: Final = "remote.log.metadata.topic.replication.factor"
RETENTION_MS: Final = "remote.log.metadata.topic.retention.ms"
MIN_ISR: Final = "remote.log.metadata.topic.min.isr"
CONSUME_WAIT_MS: Final = "remote.log.metadata.consume.wait.ms"
CONSUME_STALL_TIMEOUT_MS: Final = "remote.log.metadata.consume.stall.timeout.ms"
INIT_RETRY_MAX_TIMEOUT_MS: Final = "remote.log.metadata.initialization.retry.max.timeout.ms"
INIT_RETRY_INTERVAL_MS: Final = "remote.log.metadata.initialization.retry.interval.ms"
TOPIC_NAME: Final = "remote.log.metadata.topic.name"
NODE_ID: Final = "node.id"
BROKER_ID: Final = "broker.id"
LOG_DIR: Final = "log.dir"
CLUSTER_ID: Final = "cluster.id"

COMMON_CLIENT_PREFIX: Final = "remote.log.metadata.common.client."
PRODUCER_PREFIX: Final = "remote.log.metadata.producer."
CONSUMER_PREFIX: Final = "remote.log.metadata.consumer."
ADMIN_PREFIX: Final = "remote.log.metadata.admin."
_CLIENT_PREFIXES: Final = (COMMON_CLIENT_PREFIX, PRODUCER_PREFIX, CONSUMER_PREFIX, ADMIN_PREFIX)

DEFAULT_TOPIC_NAME: Final = "__remote_log_metadata"
_SHORT_MAX: Final = 32767

CONFIG_KEYS: Final[tuple[ConfigKey, ...]] = (
    ConfigKey(
        NUM_PARTITIONS,
        "int",
        minimum=1,
        default="50",
        doc="Partitions of the metadata topic; must equal the existing topic's count.",
    ),
    ConfigKey(
        REPLICATION_FACTOR,
        "int",
        minimum=1,
        maximum=_SHORT_MAX,
        default="3",
        doc="Replication factor of the metadata topic when it is created.",
    ),
    ConfigKey(
        RETENTION_MS,
        "long",
        default="-1",
        doc="retention.ms of the metadata topic when it is created: -1 (keep everything) or > 0.",
    ),
    ConfigKey(
        MIN_ISR,
        "int",
        minimum=1,
        maximum=_SHORT_MAX,
        default="2",
        doc="min.insync.replicas of the metadata topic when it is created.",
    ),
    ConfigKey(
        CONSUME_WAIT_MS,
        "long",
        minimum=0,
        default="120000",
        doc="How long a mutating call waits for this node's consumer to apply its record "
        "(read-your-writes) before its future fails with a timeout.",
    ),
    ConfigKey(
        CONSUME_STALL_TIMEOUT_MS,
        "long",
        minimum=0,
        default="30000",
        doc="tierlog's own key: how long the consumer may read nothing from a metadata "
        "partition that a write or a replay waits for, while the broker has records past its "
        "position, before it is replaced by a new librdkafka client resuming where it stood "
        "(librdkafka can lose a client's brokers for good after a broker restart, with no "
        "error); 0 turns the check off.",
    ),
    ConfigKey(
        INIT_RETRY_MAX_TIMEOUT_MS,
        "long",
        minimum=0,
        default="120000",
        doc="How long configure() retries reaching the cluster and creating the topic before "
        "it fails (Kafka exits the broker instead).",
    ),
    ConfigKey(
        INIT_RETRY_INTERVAL_MS,
        "long",
        minimum=0,
        default="100",
        doc="Pause between two initialization attempts.",
    ),
    ConfigKey(
        TOPIC_NAME,
        "string",
        non_empty=True,
        default=DEFAULT_TOPIC_NAME,
        doc="tierlog's own key (Kafka hard-codes the name): the metadata topic.",
    ),
    ConfigKey(
        NODE_ID,
        "int",
        default="(required)",
        doc="This node's id (the RemoteLogManager passes it); names the clients.",
    ),
    ConfigKey(
        BROKER_ID,
        "int",
        default="(node.id)",
        doc="Deprecated name of node.id, used when node.id is absent.",
    ),
    ConfigKey(LOG_DIR, "string", default="(unset)", doc="Accepted (the RLM passes it); unused."),
    ConfigKey(CLUSTER_ID, "string", default="(unset)", doc="Accepted (the RLM passes it); unused."),
)
"""Every key of the plugin (the client prefixes aside), with its default and meaning."""

_KEYS_BY_NAME: Final = {key.name: key for key in CONFIG_KEYS}

_PRODUCER_FORCED: Final = {"acks": "all", "enable.idempotence": "true"}
_CONSUMER_FORCED: Final = {
    "enable.auto.commit": "false",
    "enable.auto.offset.store": "false",
    "auto.offset.reset": "earliest",
    # The consumer finds the end of a partition this way (Kafka's ConsumerTask compares
    # positions with end offsets; a gap at the end, as compaction leaves, never blocks EOF).
    "enable.partition.eof": "true",
}
_CONSUMER_DEFAULTS: Final = {
    # librdkafka's defaults prefetch up to 64 MiB and 50 MiB fetches; a replay needs neither.
    "queued.max.messages.kbytes": "16384",
    "fetch.max.bytes": str(8 * 1024 * 1024),
    # The Java consumer's default; librdkafka's is read_committed.
    "isolation.level": "read_uncommitted",
    # A seek (every new assignment replays from the beginning) waits for the fetch in flight;
    # 500 ms (both clients' default) would be added to every replay.
    "fetch.wait.max.ms": "100",
    # Once the prefetch queue is full librdkafka waits this long before fetching again; its
    # 1000 ms default made a bare reader of a million records six times slower
    # (bench/rlmm_bootstrap.py). 0 would spin the fetcher.
    "fetch.queue.backoff.ms": "10",
}


def _client_id(node_id: int, role: str) -> str:
    """Kafka's client ids: ``__remote_log_metadata_client_<nodeId>_<role>``."""
    return f"__remote_log_metadata_client_{node_id}_{role}"


def _parse(configs: Mapping[str, str], name: str) -> object:
    key = _KEYS_BY_NAME[name]
    raw = configs.get(name)
    if raw is None or (isinstance(raw, str) and not raw.strip() and key.kind != "string"):
        return None
    value = key.parse(raw)
    key.check(value)
    return value


def _int(configs: Mapping[str, str], name: str) -> int:
    value = _parse(configs, name)
    if value is None:
        default = _KEYS_BY_NAME[name].default
        assert default is not None
        return int(default)
    assert isinstance(value, int)
    return value


def _client_props(configs: Mapping[str, str], prefix: str) -> tuple[dict[str, str], dict[str, str]]:
    """Common client keys overridden by ``prefix`` keys (prefixes stripped), and for each key
    the key as written, for messages."""
    props: dict[str, str] = {}
    where: dict[str, str] = {}
    for source in (COMMON_CLIENT_PREFIX, prefix):
        for key, value in configs.items():
            if key.startswith(source) and len(key) > len(source):
                short = key[len(source) :]
                props[short] = str(value)
                where[short] = key
    return props, where


def _forced(
    props: dict[str, str], forced: Mapping[str, str], role: str, where: Mapping[str, str]
) -> None:
    for key, value in forced.items():
        given = props.get(key)
        if given is not None and given.strip().lower() != value:
            _LOG.warning(
                "%s=%s is overridden: the RLMM %s always uses %s=%s (as Kafka's TBRLMM)",
                where.get(key, key),
                given,
                role,
                key,
                value,
            )
        props[key] = value


@dataclass(frozen=True, slots=True)
class TopicRlmmConfig:
    """The plugin's configuration, parsed and validated; client secrets stay out of ``repr``.

    ``producer``, ``consumer`` and ``admin`` are complete librdkafka configurations (translated
    from the Java keys, with Kafka's forced settings); the clients are built from them as is.
    """

    node_id: int
    bootstrap_servers: str
    topic_name: str = DEFAULT_TOPIC_NAME
    num_partitions: int = 50
    replication_factor: int = 3
    retention_ms: int = -1
    min_isr: int = 2
    consume_wait_ms: int = 120_000
    consume_stall_timeout_ms: int = 30_000
    initialization_retry_max_timeout_ms: int = 120_000
    initialization_retry_interval_ms: int = 100
    log_dir: str | None = None
    cluster_id: str | None = None
    producer: Mapping[str, str] = field(default_factory=dict, repr=False)
    consumer: Mapping[str, str] = field(default_factory=dict, repr=False)
    admin: Mapping[str, str] = field(default_factory=dict, repr=False)

    @staticmethod
    def keys() -> frozenset[str]:
        """Every key accepted by name (the client prefixes aside)."""
        return frozenset(_KEYS_BY_NAME)

    @staticmethod
    def prefixes() -> tuple[str, ...]:
        """The client key prefixes, common first."""
        return _CLIENT_PREFIXES

    @classmethod
    def from_configs(
        cls,
        configs: Mapping[str, str],
        *,
        extra_keys: Collection[str] = (),
        extra_prefixes: tuple[str, ...] = (),
        owner: str = "topic RLMM",
    ) -> TopicRlmmConfig:
        """Parse and validate ``configs`` (the ``rlmm.config.`` keys, prefix stripped).

        ``ConfigError`` names the key at fault: a missing ``node.id``, a value Kafka would
        refuse, a client setting librdkafka cannot be given (a JKS store), a missing
        ``remote.log.metadata.common.client.bootstrap.servers``. Unknown keys and Java-only
        client keys are reported in a WARNING.

        A plugin built on this one (the compacted RLMM) parses keys of its own from the same
        mapping: ``extra_keys`` and keys starting with one of ``extra_prefixes`` are not
        reported as unknown, and the "did you mean" of an unknown key considers them too (a
        misspelt key of the other plugin gets its hint). ``owner`` names the plugin in the
        messages.
        """
        known = set(_KEYS_BY_NAME) | set(extra_keys)
        prefixes = _CLIENT_PREFIXES + tuple(extra_prefixes)
        unknown = sorted(
            key for key in configs if key not in known and not key.startswith(prefixes)
        )
        if unknown:
            _LOG.warning(
                "%s ignores unknown configuration key(s): %s",
                owner,
                ", ".join(key + did_you_mean(key, known) for key in unknown),
            )
        node = _parse(configs, NODE_ID)
        if node is None:
            node = _parse(configs, BROKER_ID)
        if node is None:
            raise ConfigError(
                f"the {owner} needs {NODE_ID} (or the deprecated {BROKER_ID}): it names the "
                "clients, as in Kafka; the RemoteLogManager passes it, set it when configuring "
                "the RLMM by hand"
            )
        assert isinstance(node, int)
        retention_ms = _int(configs, RETENTION_MS)
        if retention_ms != -1 and retention_ms <= 0:
            raise ConfigError(
                f"Invalid value {retention_ms} for configuration {RETENTION_MS}: it must be -1 "
                "(unlimited) or greater than 0"
            )
        topic = _parse(configs, TOPIC_NAME)
        topic_name = topic if isinstance(topic, str) and topic else DEFAULT_TOPIC_NAME
        log_dir = _parse(configs, LOG_DIR)
        cluster_id = _parse(configs, CLUSTER_ID)
        clients = {
            role: cls._client(configs, prefix, node, role, owner)
            for role, prefix in (
                ("producer", PRODUCER_PREFIX),
                ("consumer", CONSUMER_PREFIX),
                ("admin", ADMIN_PREFIX),
            )
        }
        return cls(
            node_id=node,
            bootstrap_servers=clients["admin"]["bootstrap.servers"],
            topic_name=topic_name,
            num_partitions=_int(configs, NUM_PARTITIONS),
            replication_factor=_int(configs, REPLICATION_FACTOR),
            retention_ms=retention_ms,
            min_isr=_int(configs, MIN_ISR),
            consume_wait_ms=_int(configs, CONSUME_WAIT_MS),
            consume_stall_timeout_ms=_int(configs, CONSUME_STALL_TIMEOUT_MS),
            initialization_retry_max_timeout_ms=_int(configs, INIT_RETRY_MAX_TIMEOUT_MS),
            initialization_retry_interval_ms=_int(configs, INIT_RETRY_INTERVAL_MS),
            log_dir=log_dir if isinstance(log_dir, str) and log_dir else None,
            cluster_id=cluster_id if isinstance(cluster_id, str) and cluster_id else None,
            producer=clients["producer"],
            consumer=clients["consumer"],
            admin=clients["admin"],
        )

    @staticmethod
    def _client(
        configs: Mapping[str, str], prefix: str, node_id: int, role: str, owner: str
    ) -> dict[str, str]:
        props, where = _client_props(configs, prefix)
        translated = translate(props, where)
        if translated.dropped:
            _LOG.warning(
                "the RLMM %s ignores Java-only client key(s) librdkafka has no counterpart for: %s",
                role,
                ", ".join(translated.dropped),
            )
        result = dict(translated.properties)
        servers = result.get("bootstrap.servers", "").strip()
        if not servers:
            raise ConfigError(
                f"the {owner}'s {role} has no bootstrap servers: set "
                f"{COMMON_CLIENT_PREFIX}bootstrap.servers (rlmm.config."
                f"{COMMON_CLIENT_PREFIX}bootstrap.servers in server.properties) to the cluster "
                "holding the metadata topic"
            )
        result["bootstrap.servers"] = servers
        if role == "producer":
            _forced(result, _PRODUCER_FORCED, role, where)
        elif role == "consumer":
            _forced(result, _CONSUMER_FORCED, role, where)
            for key, value in _CONSUMER_DEFAULTS.items():
                result.setdefault(key, value)
        if "client.id" in result and result["client.id"] != _client_id(node_id, role):
            _LOG.warning(
                "%s is overridden: the RLMM %s's client id is %s (as Kafka's TBRLMM)",
                where.get("client.id", "client.id"),
                role,
                _client_id(node_id, role),
            )
        result["client.id"] = _client_id(node_id, role)
        if role == "consumer":
            # librdkafka will not create a consumer without a group; the consumer only ever
            # assign()s and never commits, so the group is never joined nor written.
            result.setdefault("group.id", _client_id(node_id, role))
        return result

    def topic_configs(self) -> dict[str, str]:
        """The metadata topic's configs at creation, as Kafka's TBRLMM sets them."""
        return {
            "retention.ms": str(self.retention_ms),
            "cleanup.policy": "delete",
            "remote.storage.enable": "false",
            "min.insync.replicas": str(self.min_isr),
        }
