"""Apache Kafka 4.3.1, a real broker for the tests and benchmarks, assembled from Maven Central.

``kafka_dist/pom.xml`` names the artifacts; ``kafka_libs()`` copies them and their dependencies
into ``~/.cache/tierlog/kafka-4.3.1-<pom digest>/libs`` (``mvn dependency:copy-dependencies``,
about a minute and 60 MB the first time, reused afterwards; ``TIERLOG_KAFKA_LIBS`` points at a
directory of jars instead). Java 17 and Maven must be on ``PATH`` (``JAVA_HOME`` is honoured).

``start_kafka`` formats KRaft storage and starts one combined broker+controller on free loopback
ports; ``start_kafka_cluster`` starts several (each a broker and a voter, separate ports and
directories), all formatted with one cluster id and started together, since none is ready
before a quorum is. A node is ready when it logs ``Kafka Server started`` and its listener
accepts connections. ``tiered_storage=DIR`` turns on Kafka's own tiered storage:
``LocalTieredStorage`` (Kafka's reference RSM, from the ``kafka-storage`` test jar) writing under
``DIR`` and Kafka's ``TopicBasedRemoteLogMetadataManager`` on ``__remote_log_metadata``, the
oracle of the interoperability tests.

``run_kafka_class`` runs one of Kafka's tools from the same jars (``DumpLogSegments``, the
console consumer with Kafka's formatters, ``StorageTool``).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from services._common import Service, free_ports, spawn_process, wait_ready

__all__ = [
    "KAFKA_VERSION",
    "LOCAL_TIERED_STORAGE",
    "KafkaCluster",
    "broker_properties",
    "kafka_libs",
    "restart_kafka",
    "run_kafka_class",
    "start_again",
    "start_kafka",
    "start_kafka_cluster",
    "stop_kafka",
]

KAFKA_VERSION: Final = "4.3.1"
DIST_DIR: Final = Path(__file__).resolve().parent / "kafka_dist"
POM: Final = DIST_DIR / "pom.xml"
LOG4J_CONFIG: Final = DIST_DIR / "log4j2.properties"
LOCAL_TIERED_STORAGE: Final = "org.apache.kafka.server.log.remote.storage.LocalTieredStorage"
READY_LINE: Final = "Kafka Server started"
"""What ``KafkaRaftServer`` logs once the broker serves (after the controller quorum formed)."""

DEFAULT_HEAP: Final = "768m"
START_TIMEOUT_S: Final = 180.0
"""A broker listens in 10-25 s on two busy cores; a three-node quorum takes longer."""


# The jars ---------------------------------------------------------------------------------------
def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tierlog"


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise RuntimeError("Java 17 is needed to run Apache Kafka: `java` is not on PATH")
    return found


def kafka_libs() -> Path:
    """The directory of Kafka's jars, downloaded with Maven the first time.

    Safe with several processes (pytest workers) at once: one downloads under a lock file while
    the others wait, then all reuse the complete directory.
    """
    override = os.environ.get("TIERLOG_KAFKA_LIBS")
    if override:
        libs = Path(override)
        if not any(libs.glob("kafka_2.13-*.jar")):
            raise RuntimeError(f"TIERLOG_KAFKA_LIBS={override} holds no kafka_2.13 jar")
        return libs
    digest = hashlib.sha256(POM.read_bytes()).hexdigest()[:12]
    home = _cache_root() / f"kafka-{KAFKA_VERSION}-{digest}"
    libs, complete = home / "libs", home / ".complete"
    if complete.exists():
        return libs
    home.mkdir(parents=True, exist_ok=True)
    with (home / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if complete.exists():
            return libs
        mvn = shutil.which("mvn")
        if mvn is None:
            raise RuntimeError(
                "Maven is needed to assemble Apache Kafka from Maven Central: `mvn` is not on "
                "PATH (Debian: apt-get install maven)"
            )
        staging = home / "libs.partial"
        shutil.rmtree(staging, ignore_errors=True)
        result = subprocess.run(
            [
                mvn,
                "-q",
                "-B",
                "-f",
                str(POM),
                "dependency:copy-dependencies",
                f"-DoutputDirectory={staging}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"mvn dependency:copy-dependencies failed ({result.returncode}):\n"
                f"{result.stdout[-4000:]}{result.stderr[-4000:]}"
            )
        shutil.rmtree(libs, ignore_errors=True)
        staging.rename(libs)
        complete.write_text(f"{KAFKA_VERSION}\n")
    return libs


def classpath() -> str:
    """The Java class path of every Kafka jar (a wildcard the JVM expands)."""
    return f"{kafka_libs()}/*"


def run_kafka_class(
    main_class: str,
    args: Sequence[str],
    *,
    timeout: float = 180.0,
    heap: str = "256m",
    check: bool = True,
    input_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``main_class`` from Kafka's jars; with ``check``, a non-zero exit raises with its
    output."""
    argv = [
        _java(), f"-Xmx{heap}", "-XX:+UseSerialGC", "-XX:-UsePerfData",
        f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
        "-cp", classpath(), main_class, *args,
    ]  # fmt: skip
    result = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, check=False, input=input_text
    )
    if check and result.returncode != 0:
        raise RuntimeError(
            f"{main_class} {' '.join(args)} exited with {result.returncode}:\n"
            f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
        )
    return result


# Configuration ----------------------------------------------------------------------------------
def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes in Kafka's base64url form, without padding. As
    Kafka's ``Uuid.randomUuid``, never one starting with ``-``, which a command line would take
    for an option (``StorageTool format -t -XYZ...`` fails)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


@dataclass(frozen=True)
class _Node:
    node_id: int
    port: int
    controller_port: int
    directory: Path


def broker_properties(
    node: _Node,
    voters: str,
    *,
    replication_factor: int,
    tiered_storage: Path | None,
    metadata_partitions: int,
    extra: Mapping[str, str],
) -> dict[str, str]:
    """``server.properties`` of one combined broker+controller on loopback."""
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(node.directory / "data"),
        "metadata.log.dir": str(node.directory / "metadata"),
        "num.partitions": "1",
        "auto.create.topics.enable": "false",
        "offsets.topic.replication.factor": str(replication_factor),
        "offsets.topic.num.partitions": "5",
        "transaction.state.log.replication.factor": str(replication_factor),
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "5",
        "share.coordinator.state.topic.replication.factor": str(replication_factor),
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "default.replication.factor": str(replication_factor),
        "min.insync.replicas": "1",
        "log.cleaner.backoff.ms": "1000",
    }
    if tiered_storage is not None:
        props |= {
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": LOCAL_TIERED_STORAGE,
            "remote.log.storage.manager.impl.prefix": "rsm.config.",
            "remote.log.metadata.manager.impl.prefix": "rlmm.config.",
            "rsm.config.dir": str(tiered_storage),
            # Without it the broker's RLMM has no bootstrap servers and the broker stops.
            "remote.log.metadata.manager.listener.name": "PLAINTEXT",
            "rlmm.config.remote.log.metadata.topic.replication.factor": str(replication_factor),
            "rlmm.config.remote.log.metadata.topic.min.isr": "1",
            "rlmm.config.remote.log.metadata.topic.num.partitions": str(metadata_partitions),
            "remote.log.manager.task.interval.ms": "1000",
        }
    return props | dict(extra)


def _write_properties(path: Path, props: Mapping[str, str]) -> None:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


def _ready(service: Service) -> bool:
    port = int(str(service.extra["port"]))
    try:
        with service.log_path.open("rb") as log:
            started = READY_LINE.encode() in log.read()
    except OSError:
        return False
    return started and _listening(port)


def _argv(properties: Path, heap: str) -> list[str]:
    return [
        _java(), f"-Xmx{heap}", f"-Xms{heap}", "-XX:+UseSerialGC", "-XX:-UsePerfData",
        "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
        "-cp", classpath(), "kafka.Kafka", str(properties),
    ]  # fmt: skip


def _prepare(
    nodes: Sequence[_Node],
    *,
    tiered_storage: Path | None,
    metadata_partitions: int,
    extra: Mapping[str, str],
    heap: str,
) -> list[Service]:
    """Write each node's properties, format its storage, and spawn it (not yet ready)."""
    voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in nodes)
    cluster_id = new_cluster_id()
    services = []
    for node in nodes:
        node.directory.mkdir(parents=True, exist_ok=True)
        props = broker_properties(
            node,
            voters,
            replication_factor=len(nodes),
            tiered_storage=tiered_storage,
            metadata_partitions=metadata_partitions,
            extra=extra,
        )
        properties = node.directory / "server.properties"
        _write_properties(properties, props)
        run_kafka_class(
            "kafka.tools.StorageTool", ["format", "-t", cluster_id, "-c", str(properties)]
        )
    for node in nodes:
        properties = node.directory / "server.properties"
        service = spawn_process(
            "kafka", _argv(properties, heap), node.directory, f"127.0.0.1:{node.port}"
        )
        service.extra.update(
            node_id=node.node_id,
            port=node.port,
            controller_port=node.controller_port,
            properties=properties,
            cluster_id=cluster_id,
            heap=heap,
            tiered_storage=tiered_storage,
        )
        services.append(service)
    return services


def start_kafka(
    directory: Path,
    *,
    tiered_storage: Path | None = None,
    metadata_partitions: int = 5,
    properties: Mapping[str, str] | None = None,
    heap: str = DEFAULT_HEAP,
    timeout: float = START_TIMEOUT_S,
    port: int | None = None,
) -> Service:
    """One combined broker+controller (node id 1) on ``port`` (default: a free one) and a free
    controller port; ``url`` is its bootstrap address ``127.0.0.1:PORT``. ``properties`` are
    added to (and override) the generated ones. With ``tiered_storage``, the broker runs
    Kafka's own tiered storage with ``metadata_partitions`` partitions of
    ``__remote_log_metadata``."""
    free_port, controller_port = free_ports(2)
    port = port or free_port
    node = _Node(1, port, controller_port, directory)
    (service,) = _prepare(
        [node],
        tiered_storage=tiered_storage,
        metadata_partitions=metadata_partitions,
        extra=properties or {},
        heap=heap,
    )
    return wait_ready(service, lambda: _ready(service), timeout=timeout)


@dataclass
class KafkaCluster:
    """Several combined broker+controller nodes forming one KRaft cluster."""

    nodes: list[Service]

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(node.url for node in self.nodes)

    def node(self, node_id: int) -> Service:
        for service in self.nodes:
            if service.extra["node_id"] == node_id:
                return service
        raise KeyError(node_id)

    def restart(self, node_id: int, *, timeout: float = START_TIMEOUT_S) -> Service:
        """Stop (SIGTERM) one node and start it again on the same ports and directory."""
        return restart_kafka(self.node(node_id), timeout=timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every node at once (one at a time, each would wait for the quorum the others
        are leaving)."""
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            for node in self.nodes:
                pool.submit(node.stop, timeout)

    def __iter__(self) -> Iterator[Service]:
        return iter(self.nodes)

    def __enter__(self) -> KafkaCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_kafka_cluster(
    directory: Path,
    *,
    size: int = 3,
    tiered_storage: Path | None = None,
    metadata_partitions: int = 5,
    properties: Mapping[str, str] | None = None,
    heap: str = DEFAULT_HEAP,
    timeout: float = START_TIMEOUT_S,
) -> KafkaCluster:
    """``size`` nodes (ids 1..size), each a broker and a controller voter, with replication
    factor ``size`` for the internal topics."""
    ports = free_ports(2 * size)
    nodes = [
        _Node(i + 1, ports[2 * i], ports[2 * i + 1], directory / f"node-{i + 1}")
        for i in range(size)
    ]
    services = _prepare(
        nodes,
        tiered_storage=tiered_storage,
        metadata_partitions=metadata_partitions,
        extra=properties or {},
        heap=heap,
    )
    try:
        for service in services:
            wait_ready(service, lambda s=service: _ready(s), timeout=timeout)  # type: ignore[misc]
    except BaseException:
        for service in services:
            service.stop()
        raise
    return KafkaCluster(services)


def restart_kafka(
    service: Service, *, timeout: float = START_TIMEOUT_S, kill: bool = False
) -> Service:
    """Stop the node (SIGTERM, or SIGKILL with ``kill``) and start it again on the same
    directory and ports. ``service`` itself is updated (and returned), so every holder of it
    (a fixture that stops it at the end) sees the new process; the previous log is kept as
    ``kafka.log.N``."""
    if kill:
        service.kill()
    else:
        service.stop(timeout=60)
    generation = 1
    while (service.directory / f"kafka.log.{generation}").exists():
        generation += 1
    service.log_path.rename(service.directory / f"kafka.log.{generation}")
    properties = Path(str(service.extra["properties"]))
    heap = str(service.extra["heap"])
    fresh = spawn_process("kafka", _argv(properties, heap), service.directory, service.url)
    service.process = fresh.process
    service.log_path = fresh.log_path
    return wait_ready(service, lambda: _ready(service), timeout=timeout)


def stop_kafka(service: Service) -> None:
    """Stop a node without restarting it (``restart_kafka`` later starts it again)."""
    service.stop(timeout=60)


def start_again(service: Service, *, timeout: float = START_TIMEOUT_S) -> Service:
    """Start a stopped node again on its directory and ports (after ``stop_kafka``)."""
    if service.process.poll() is None:
        raise RuntimeError(f"{service.name} at {service.url} is still running")
    return restart_kafka(service, timeout=timeout)


def create_topic(bootstrap: str, name: str, partitions: int, *, timeout: float = 120.0) -> None:
    """Create ``name`` (replication factor 1) and wait until every partition has a leader, so
    that a test's first produce or read does not race the controller."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(timeout=timeout)
    deadline = time.monotonic() + timeout
    while True:
        topic = admin.list_topics(name, timeout=30).topics.get(name)
        if (
            topic is not None
            and topic.error is None
            and len(topic.partitions) == partitions
            and all(p.leader >= 0 for p in topic.partitions.values())
        ):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"no leader for every partition of {name} after {timeout:.0f} s")
        time.sleep(0.2)
