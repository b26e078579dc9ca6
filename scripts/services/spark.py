"""A real Apache Spark standalone cluster for tests and benchmarks, run from the pyspark package.

The pyspark wheel (``tierlog[spark]``) carries Spark's jars and ``bin/spark-class`` but no
``sbin/start-master.sh``, so the daemons are started here the way those scripts would:
``spark-class org.apache.spark.deploy.master.Master`` and, per worker,
``spark-class org.apache.spark.deploy.worker.Worker spark://127.0.0.1:PORT``, with ``SPARK_HOME``
set to the pyspark package directory. Everything listens on loopback (``SPARK_LOCAL_IP``,
``--host 127.0.0.1``) on free ports; each daemon runs in its own process group with its output
in ``<directory>/<name>.log``, and the workers keep their application directories (executor
logs, shuffle files) under ``<directory>/worker-N/work``.

The master is ready when it has been elected leader and its port accepts connections; a worker
when it logs ``Successfully registered with master`` (10-15 s for the whole cluster on two
cores). Executors are JVMs the worker starts in its own process group, so stopping a worker
(SIGTERM to the group, SIGKILL if it lingers) stops its executors and their Python workers too.
A worker starts each executor in ``<work>/<app id>/<executor id>`` (its logs are there);
``SparkCluster.executors`` finds the running executor JVMs by that working directory (Linux
``/proc``), which is what a test that kills an executor needs: a cluster of another test on the
same machine has other work directories.

A driver reaches the cluster with ``SparkSession.builder.master(cluster.url)``; its executors run
the Python the driver names (``PYSPARK_PYTHON``, which ``tierlog.compaction.spark_session`` sets
to the driver's own interpreter), so they import tierlog from the same virtualenv. Java 17 must
be on ``PATH`` (``JAVA_HOME`` is honoured).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from services._common import Service, free_ports, spawn_process, wait_ready

__all__ = [
    "EXECUTOR_CLASS",
    "MASTER_READY_LINE",
    "WORKER_READY_LINE",
    "ExecutorProcess",
    "SparkCluster",
    "spark_home",
    "start_spark_cluster",
    "work_dir",
]

MASTER_CLASS: Final = "org.apache.spark.deploy.master.Master"
WORKER_CLASS: Final = "org.apache.spark.deploy.worker.Worker"
EXECUTOR_CLASS: Final = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
"""The main class of an executor JVM a standalone worker starts."""
MASTER_READY_LINE: Final = "I have been elected leader!"
"""What the master logs once it accepts workers and applications (recovery mode NONE)."""
WORKER_READY_LINE: Final = "Successfully registered with master"
START_TIMEOUT_S: Final = 120.0
"""The cluster is ready in 10-15 s on two idle cores; a busy machine (tests on every core)
takes several times that."""
DAEMON_MEMORY: Final = "512m"
"""Heap of the master and worker daemons (Spark's default is 1g): they only schedule; the work
is done by executors, whose heap is the application's ``spark.executor.memory``."""
DAEMON_JAVA_OPTS: Final = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:-UsePerfData"
"""JVM options of the daemons only (not of executors): they start faster and idle lighter, and
the daemons do no heavy work whose speed these options would cost."""


def spark_home() -> Path:
    """The pyspark package directory, which is a complete ``SPARK_HOME`` (``bin``, ``jars``)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "pyspark is not installed: install tierlog's Spark extra (pip install 'tierlog[spark]')"
        )
    home = Path(next(iter(spec.submodule_search_locations)))
    if not (home / "bin" / "spark-class").is_file() or not (home / "jars").is_dir():
        raise RuntimeError(f"{home} has no bin/spark-class or jars/: not a pyspark wheel")
    return home


def _check_java() -> None:
    home = os.environ.get("JAVA_HOME")
    if home:
        if not (Path(home) / "bin" / "java").is_file():
            raise RuntimeError(f"JAVA_HOME={home} has no bin/java (Spark needs Java 17 or later)")
    elif shutil.which("java") is None:
        raise RuntimeError("Java 17 is needed to run Spark: `java` is not on PATH")


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


def _logged(service: Service, line: str) -> bool:
    try:
        with service.log_path.open("rb") as log:
            return line.encode() in log.read()
    except OSError:
        return False


def _env(home: Path, extra: Mapping[str, str]) -> dict[str, str]:
    return {
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
        "SPARK_DAEMON_JAVA_OPTS": DAEMON_JAVA_OPTS,
        # The launcher JVM spark-class runs first to build the command line.
        "SPARK_LAUNCHER_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        # No conf/spark-env.sh of some other installation.
        "SPARK_CONF_DIR": str(home / "conf"),
        # The daemons must not bind to or advertise anything but loopback.
        "SPARK_PUBLIC_DNS": "127.0.0.1",
        # The master's REST submission server would take the fixed port 6066 (the next free one
        # when taken): nothing here submits through it.
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        **extra,
    }


def work_dir(worker: Service) -> Path:
    """Where ``worker`` keeps its applications' directories (its ``--work-dir``)."""
    return worker.directory / "work"


@dataclass(frozen=True)
class ExecutorProcess:
    """A running executor JVM of the cluster."""

    worker: Service
    app_id: str
    executor_id: str
    pid: int

    @property
    def directory(self) -> Path:
        """The executor's working directory, with its ``stdout`` and ``stderr`` logs."""
        return work_dir(self.worker) / self.app_id / self.executor_id

    def alive(self) -> bool:
        """Whether the process still runs (a zombie its worker has not reaped yet does not)."""
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return False
        # The state follows the command name, which is in parentheses and may hold spaces.
        return stat.rpartition(")")[2].split()[0] != "Z"


def _cmdline(pid: str) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


@dataclass
class SparkCluster:
    """A standalone master and its workers; ``url`` is what a driver's ``master`` is set to."""

    master: Service
    workers: list[Service]

    @property
    def url(self) -> str:
        """``spark://127.0.0.1:PORT``."""
        return self.master.url

    @property
    def services(self) -> list[Service]:
        """The master then the workers."""
        return [self.master, *self.workers]

    @property
    def name(self) -> str:
        return "spark"

    def exited(self) -> Service | None:
        """A daemon of the cluster that is no longer running, if any."""
        for service in self.services:
            if service.process.poll() is not None:
                return service
        return None

    def executors(self, app_id: str | None = None) -> list[ExecutorProcess]:
        """The executor JVMs running on this cluster's workers (of ``app_id`` only, if given),
        found in ``/proc`` by their working directory, ``<work>/<app id>/<executor id>``: the
        Python workers under an executor share that directory but not its main class."""
        works = {work_dir(w).resolve(): w for w in self.workers}
        found = []
        proc = Path("/proc")
        if not proc.is_dir():
            raise RuntimeError("finding executor processes needs Linux's /proc")
        for entry in proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cwd = (entry / "cwd").resolve(strict=True)
            except OSError:  # gone, or another user's
                continue
            worker = works.get(cwd.parent.parent)
            if worker is None or (app_id is not None and cwd.parent.name != app_id):
                continue
            if EXECUTOR_CLASS not in _cmdline(entry.name):
                continue
            process = ExecutorProcess(worker, cwd.parent.name, cwd.name, int(entry.name))
            if process.alive():
                found.append(process)
        return sorted(found, key=lambda e: (e.app_id, e.executor_id))

    def log_tail(self, lines: int = 40) -> str:
        """The end of every daemon's log, each under its name."""
        return "\n".join(
            f"--- {service.log_path}\n{service.log_tail(lines)}" for service in self.services
        )

    def stop(self, timeout: float = 20.0) -> None:
        """Stop every daemon at once (a worker alone would first try to reach the master, the
        master alone would wait for workers); each process group is SIGKILLed if it lingers."""
        with ThreadPoolExecutor(len(self.services)) as pool:
            for future in [pool.submit(service.stop, timeout) for service in self.services]:
                future.result()

    def __iter__(self) -> Iterator[Service]:
        return iter(self.services)

    def __enter__(self) -> SparkCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_spark_cluster(
    directory: Path,
    *,
    workers: int = 1,
    worker_cores: int = 2,
    worker_memory: str = "2g",
    port: int | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = START_TIMEOUT_S,
) -> SparkCluster:
    """A master on ``port`` (default: a free one) and ``workers`` workers, each offering
    ``worker_cores`` cores and ``worker_memory`` (Spark's size syntax: ``2g``, ``512m``) to
    executors; returns once every worker has registered. ``env`` is added to every daemon's
    environment (``SPARK_WORKER_OPTS``, ``SPARK_MASTER_OPTS``...)."""
    if workers < 1:
        raise ValueError(f"a cluster needs at least one worker, got {workers}")
    home = spark_home()
    _check_java()
    master_port, master_ui, *worker_ports = free_ports(2 + 2 * workers)
    master_port = port or master_port
    url = f"spark://127.0.0.1:{master_port}"
    spark_class = str(home / "bin" / "spark-class")
    daemon_env = _env(home, env or {})

    master = spawn_process(
        "spark-master",
        ["bash", spark_class, MASTER_CLASS,
         "--host", "127.0.0.1", "--port", str(master_port), "--webui-port", str(master_ui)],
        directory / "master",
        url,
        env=daemon_env,
    )  # fmt: skip
    master.extra.update(port=master_port, webui_port=master_ui)
    started = [master]
    try:
        wait_ready(
            master,
            lambda: _logged(master, MASTER_READY_LINE) and _listening(master_port),
            timeout=timeout,
        )
        members = []
        for index in range(workers):
            worker_port, worker_ui = worker_ports[2 * index : 2 * index + 2]
            worker_dir = directory / f"worker-{index + 1}"
            worker = spawn_process(
                f"spark-worker-{index + 1}",
                ["bash", spark_class, WORKER_CLASS,
                 "--host", "127.0.0.1", "--port", str(worker_port),
                 "--webui-port", str(worker_ui),
                 "--cores", str(worker_cores), "--memory", worker_memory,
                 "--work-dir", str(worker_dir / "work"), url],
                worker_dir,
                url,
                env=daemon_env,
            )  # fmt: skip
            worker.extra.update(
                port=worker_port, webui_port=worker_ui, cores=worker_cores, memory=worker_memory
            )
            started.append(worker)
            members.append(worker)
        for worker in members:
            wait_ready(
                worker,
                lambda w=worker: _logged(w, WORKER_READY_LINE),  # type: ignore[misc]
                timeout=timeout,
            )
    except BaseException:
        SparkCluster(master, started[1:]).stop()
        raise
    return SparkCluster(master, members)
