"""Run one of the test servers in the foreground, to try tierlog's plugins by hand.

Usage (from a checkout of the repository, with the venv of ``scripts/test``)::

    python scripts/services/run.py seaweedfs --port 8333 --bucket test
    python scripts/services/run.py fake-gcs --port 4443 --bucket tierlog-test
    python scripts/services/run.py azurite --port 10000 --bucket kafka
    python scripts/services/run.py kafka --port 9092 [--tiered-storage]
    python scripts/services/run.py spark --port 7077 [--workers 2 --worker-cores 1]

It starts the server as the tests do (the launchers next to this file: free ports for what is
not given, loopback only), creates the buckets (containers on Azurite), prints one line
``ready: ...`` with the endpoint, then serves until Ctrl-C or SIGTERM and stops the server's
whole process group. Data go to ``--dir``, else to a temporary directory removed at exit.

- SeaweedFS's S3 gateway is open: any access key and secret are accepted (boto3 still wants
  some, e.g. ``aws.access.key.id=any``); path-style requests.
- fake-gcs-server runs with its memory backend by default: the filesystem backend makes every
  ``/``-separated part of an object name a file name, limited to 255 bytes, which Kafka's
  longest topic names exceed in tierlog's keys (``--backend filesystem`` keeps data across a
  restart on the same ``--dir``). No credentials: ``gcs.credentials.default=false``.
- Azurite serves the well-known development account ``devstoreaccount1`` (its key is in
  ``azurite.py``) at ``http://127.0.0.1:PORT/devstoreaccount1``; it needs
  ``npm ci --prefix plugins/rsm_azure`` first.
- Apache Kafka 4.3.1 (``kafka.py``) runs one combined broker+controller (KRaft) with a
  PLAINTEXT listener at ``127.0.0.1:PORT``; it needs Java 17, and Maven the first time (its jars
  are then cached under ``~/.cache/tierlog``). ``--tiered-storage`` turns on Kafka's own tiered
  storage (``LocalTieredStorage`` under ``<dir>/tiered-storage``, Kafka's topic-based RLMM on 5
  partitions of ``__remote_log_metadata``). ``--bucket`` does not apply.
- Apache Spark (``spark.py``, from the pyspark package of ``tierlog[spark]``) runs a standalone
  master on ``spark://127.0.0.1:PORT`` and ``--workers`` workers offering ``--worker-cores``
  cores and ``--worker-memory`` each to executors; point tierlog at it with
  ``remote.log.compaction.spark.master=spark://127.0.0.1:PORT`` (or ``tierlog compact
  --engine spark --spark-master ...``). It needs Java 17; each daemon logs to ``--dir``.
  ``--bucket`` does not apply.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

if __package__ in (None, ""):  # run as a file: make ``services`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services._common import Service, free_ports
from services.spark import SparkCluster

SERVICES = ("seaweedfs", "fake-gcs", "azurite", "kafka", "spark")


def _start(args: argparse.Namespace, directory: Path) -> tuple[Service | SparkCluster, str]:
    """Start the chosen server and create its buckets; return it and its ready line."""
    buckets = args.bucket or []
    if args.service == "spark":
        from services.spark import start_spark_cluster

        if buckets:
            raise SystemExit("--bucket does not apply to spark")
        cluster = start_spark_cluster(
            directory,
            workers=args.workers,
            worker_cores=args.worker_cores,
            worker_memory=args.worker_memory,
            port=args.port,
        )
        return cluster, (
            f"ready: Spark standalone master at {cluster.url} with {args.workers} worker(s) of "
            f"{args.worker_cores} cores and {args.worker_memory} each, logs under {directory}"
        )
    if args.service == "seaweedfs":
        from services.seaweedfs import _PORT_FLAGS, create_bucket, start_seaweedfs

        ports = None
        if args.port is not None:
            others = free_ports(len(_PORT_FLAGS) - 1)
            ports = dict(zip(_PORT_FLAGS, [args.port, *others], strict=True))
        service = start_seaweedfs(directory, ports=ports)
        for name in buckets:
            create_bucket(service, name)
        return service, (
            f"ready: SeaweedFS S3 at {service.url} (path-style, any access key), "
            f"buckets: {', '.join(buckets) or 'none'}"
        )
    if args.service == "fake-gcs":
        from services.fake_gcs import create_bucket as create_gcs_bucket
        from services.fake_gcs import start_fake_gcs

        service = start_fake_gcs(directory, port=args.port, backend=args.backend)
        for name in buckets:
            create_gcs_bucket(service, name)
        return service, (
            f"ready: fake-gcs-server at {service.url} ({args.backend} backend, no "
            f"credentials), buckets: {', '.join(buckets) or 'none'}"
        )
    if args.service == "kafka":
        from services.kafka import KAFKA_VERSION, start_kafka

        if buckets:
            raise SystemExit("--bucket does not apply to kafka")
        tiered = directory / "tiered-storage" if args.tiered_storage else None
        service = start_kafka(directory, port=args.port, tiered_storage=tiered)
        return service, (
            f"ready: Apache Kafka {KAFKA_VERSION} at {service.url} (PLAINTEXT, KRaft, one node)"
            + (f", Kafka's tiered storage under {tiered}" if tiered else "")
        )
    from services.azurite import blob_endpoint, create_container, start_azurite

    service = start_azurite(directory, port=args.port)
    for name in buckets:
        create_container(service, name)
    return service, (
        f"ready: Azurite blob endpoint {blob_endpoint(service)} (account devstoreaccount1), "
        f"containers: {', '.join(buckets) or 'none'}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python scripts/services/run.py",
        description="Run a test server (S3, GCS or Azure Blob emulator, Apache Kafka, a Spark "
        "standalone cluster) until Ctrl-C.",
    )
    parser.add_argument("service", choices=SERVICES)
    parser.add_argument("--port", type=int, help="the port of its API (default: a free one)")
    parser.add_argument(
        "--bucket",
        action="append",
        metavar="NAME",
        help="a bucket (container on Azurite) to create; repeatable",
    )
    parser.add_argument("--dir", type=Path, help="where its data go (default: a temp dir)")
    parser.add_argument(
        "--backend",
        choices=("memory", "filesystem"),
        default="memory",
        help="fake-gcs only: where objects are kept (default memory, see the module's doc)",
    )
    parser.add_argument(
        "--tiered-storage",
        action="store_true",
        help="kafka only: run Kafka's own tiered storage (LocalTieredStorage under --dir)",
    )
    parser.add_argument(
        "--workers", type=int, default=1, help="spark only: how many workers (default 1)"
    )
    parser.add_argument(
        "--worker-cores",
        type=int,
        default=2,
        help="spark only: cores each worker offers to executors (default 2)",
    )
    parser.add_argument(
        "--worker-memory",
        default="2g",
        help="spark only: memory each worker offers to executors (default 2g)",
    )
    args = parser.parse_args(argv)

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with tempfile.TemporaryDirectory(prefix=f"tierlog-{args.service}-") as temp:
        directory = (args.dir or Path(temp)).resolve()
        service, ready = _start(args, directory)
        try:
            print(ready, flush=True)
            members = service.services if isinstance(service, SparkCluster) else [service]
            while not stop.wait(0.5):
                for member in members:
                    if member.process.poll() is not None:
                        print(
                            f"{member.name} exited with code {member.process.returncode}:\n"
                            f"{member.log_tail()}",
                            file=sys.stderr,
                        )
                        return 1
        finally:
            service.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
