"""Benchmark of the object-store RSM plugins (s3, gcs, azure) against their raw SDKs.

Run: ``.venv/bin/python bench/rsm.py [--backends s3,gcs,azure] [--size-mib 256] [--repeat 2]``
(``--quick``: every phase on a 16 MiB segment, one pass, 10 random fetches: a smoke run whose
figures mean nothing, written to ``--out`` or a temporary directory; it still needs the servers,
and runs each backend whose server starts). The issue's figure is for a 1 GiB segment
(``--size-mib 1024``); the default is 256 MiB to keep a run within minutes. The exit status is 1
when a backend whose server started failed.

Each backend runs against its local server, started by the bench in a temporary directory and
stopped at the end (``scripts/services``): SeaweedFS (``weed mini``) for ``s3``,
fake-gcs-server for ``gcs``, Azurite for ``azure``. The segment is real: a ``LocalLog``
(``index.interval.bytes`` 4096) filled with ``append_as_leader`` from the JSON-like 16 KiB
producer batches of ``bench/log_format.py`` and rolled, so one sealed segment of ``--size-mib``
MiB with its indexes and producer snapshot (``log.segment_copy_inputs``). The RSM runs with
its defaults and plain transforms (no compression, no encryption), except the GCS resumable
chunk size, 64 MiB for the plugin and the raw SDK alike (fake-gcs-server's resumable uploads
cost time quadratic in the number of chunks).

Figures, against the goals and the peers:

- **upload**: MB/s of segment bytes through ``rsm.copy_log_segment_data`` (the log object, the
  indexes object and the manifest) against one upload of the same file with the raw SDK at its
  defaults: boto3 ``upload_file`` (default ``TransferConfig``: 8 MiB parts, 10 threads), GCS
  ``blob.upload_from_filename`` (64 MiB chunks), Azure ``upload_blob`` of the open file; goal
  ratio >= 0.9. Passes alternate raw/plugin, best of ``--repeat``; the file is in the page cache;
- **fetch**: MB/s of reading the whole segment through ``rsm.fetch_log_segment(meta, 0)``
  (manifest warm) against the raw SDK's download of the same size: boto3 ``get_object`` body
  read (one GET, as the plugin), GCS ``blob.download_to_file``, Azure
  ``download_blob().readinto``; every stream is drained into a reused 1 MiB buffer, the
  downloads into a sink that discards; goal ratio >= 0.9. The peers run at their SDK defaults:
  GCS ``download_to_file`` checks an MD5 of the whole object, Azure ``download_blob`` fetches
  a 32 MiB range then 4 MiB ranges one at a time (``max_concurrency=1``), reading the socket
  256 KiB at a time, while the RSM reads the whole segment with one ranged GET, streamed (no
  parallel ranges: a read larger than a quarter of the chunk cache bypasses the cache and its
  prefetch), checking no digest. So each is also measured against its SDK **tuned** the way
  the plugin reads (``fetch.tuned``): GCS ``download_to_file(checksum=None,
  raw_download=True)``, one GET of the stored bytes without an MD5 (the SDK's body loop reads
  8 KiB at a time, a constant no option changes); Azure ``download_blob`` with
  ``max_single_get_size`` the whole segment (one GET), ``max_concurrency=1`` and
  ``connection_data_block_size`` the plugin's socket read size (1 MiB), the SDK holding the
  response whole in memory where the plugin holds 1 MiB. S3's default peer already reads as
  the plugin does (one ``get_object``, drained 1 MiB at a time): it has no tuned variant;
- **peak memory during upload** at two segment sizes (``--memory-mib``, default 64 and
  ``--size-mib``): the ``tracemalloc`` peak of Python allocations during one
  ``copy_log_segment_data`` (a pass of its own, untimed), and the peak RSS above the RSS before
  the copy (Linux: ``/proc/self/clear_refs`` resets ``VmHWM``; a pass without tracemalloc;
  for information: the allocator reuses what earlier passes freed, so RSS can read below the
  Python peak); against the bound part size x parallelism, read from the RSM's configuration
  (S3 parts and Azure blocks: 8 MiB x 4; GCS: one 64 MiB resumable chunk at a time); goal:
  the peak within the bound plus ``MEMORY_ALLOWANCE`` (1 MiB, for what is not part buffers:
  well below one part, so a buffer too many shows) and not growing with the size (the peak at
  the largest size within 1 MiB of the larger of the smallest's peak and the bound); the
  excess over the bound is printed;
- **GETs per fetch**: object-store GET requests (the RSM's own counters, ``rsm.metrics``) per
  ``fetch_log_segment`` of 1 MiB at a random offset with a warm manifest, over ``--fetches``
  fetches (50); goal <= 1 (a read inside a chunk already cached costs none; one spanning two
  chunks is coalesced into one GET). The maximum over the fetches is reported too.

Writes ``bench/results/rsm.json`` (or ``--out``) and, if matplotlib is importable, ``rsm.png``
beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import gc
import io
import os
import platform
import random
import sys
import tempfile
import time
import tracemalloc
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, cast

# shared by every benchmark
from _report import drop_workdir, parse_args, pyplot, save_chart, verdict, write_results
from _segments import build_log, copy_metadata  # built as bench/rlm.py builds them
from log_format import MIB, make_batches  # the same generated records as the format bench

from tierlog.log.compression import CompressionType
from tierlog.log.local_log import LocalLog
from tierlog.spi import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
    Uuid,
)
from tierlog.storage.objectstore.rsm import ObjectStoreRemoteStorageManager

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "scripts") not in sys.path:
    sys.path.insert(0, str(REPO / "scripts"))

from services._common import Service  # noqa: E402

GOAL_UPLOAD_RATIO = 0.9
GOAL_FETCH_RATIO = 0.9
GOAL_GETS_PER_FETCH = 1.0
MEMORY_ALLOWANCE = 1 * MIB
"""Python memory of an upload that is not part buffers (the SDK's request objects and
connection buffers, futures, the RSM's own objects): a fixed amount, well below one part, so
that one part buffer too many cannot hide in it."""
TOPIC_ID = Uuid.from_string("tierlogRSMbenchTopicIA")
BUCKET = "tierlog-bench"
GCS_CHUNK = 64 * MIB
DRAIN = 1 * MIB
BACKENDS = ("s3", "gcs", "azure")
NO_SERVER = "server did not start"
"""How ``errors`` starts for a backend whose server could not run here (not a failure of the
benchmark: the others still run)."""


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class _Sink(io.RawIOBase):
    """A writable file that discards what it is given (download target of the raw SDKs)."""

    def __init__(self) -> None:
        self.bytes = 0

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        n = len(memoryview(b))
        self.bytes += n
        return n


def discarded(download: Callable[[_Sink], object]) -> int:
    """The bytes ``download`` writes into a sink that discards them."""
    sink = _Sink()
    download(sink)
    return sink.bytes


def drain(stream: BinaryIO, buffer: bytearray) -> int:
    """Read ``stream`` to its end into ``buffer`` (reused); the bytes read."""
    view = memoryview(buffer)
    total = 0
    readinto = getattr(stream, "readinto", None)
    while True:
        if readinto is not None:
            n = readinto(view)
        else:
            data = stream.read(len(buffer))
            n = len(data)
        if not n:
            return total
        total += n


# Memory -------------------------------------------------------------------------------------------
def _status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def reset_peak_rss() -> bool:
    """Reset ``VmHWM`` to the current RSS (Linux >= 4.0); whether it worked."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


# The segment --------------------------------------------------------------------------------------
def build_segment(
    directory: Path, pool: list[bytes], size: int
) -> tuple[LocalLog, RemoteLogSegmentMetadata, LogSegmentData]:
    """A log with one sealed segment of about ``size`` bytes, and what copying it takes."""
    local, _ = build_log(
        directory,
        pool,
        size,
        size + 2 * MIB,
        topic_id=TOPIC_ID,
        description=f"build a {size / MIB:g} MiB segment",
    )
    (segment,) = local.sealed_segments()
    inputs = local.segment_copy_inputs(segment)
    tp = local.topic_partition
    meta = copy_metadata(inputs, TopicIdPartition(TOPIC_ID, tp.topic, tp.partition))
    return local, meta, inputs.data


def fresh_id(meta: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata:
    """The same segment under a new segment id (a new set of objects)."""
    return dataclasses.replace(
        meta, remote_log_segment_id=RemoteLogSegmentId.generate_new(meta.topic_id_partition)
    )


# Backends -----------------------------------------------------------------------------------------
class Backend(ABC):
    """One object store: its server, the plugin's RSM configuration, the raw SDK peer."""

    name: str
    peer_upload: str
    peer_fetch: str
    peer_fetch_tuned: str | None = None
    """The raw SDK's download tuned the way the plugin reads, or None when the default
    already reads so (``raw_fetch_tuned`` is then never called)."""
    fetch_tuning: str
    """How the tuned download is set, and why (or why the default needs nothing)."""
    service: Service

    @abstractmethod
    def start(self, directory: Path) -> None: ...

    @abstractmethod
    def rsm(self) -> ObjectStoreRemoteStorageManager: ...

    @abstractmethod
    def memory_bound(self, rsm: ObjectStoreRemoteStorageManager) -> tuple[int, str]:
        """The bytes of part buffers an upload may hold, from the RSM's own configuration,
        and how they are made up."""

    @abstractmethod
    def raw_upload(self, path: Path, key: str) -> None: ...

    @abstractmethod
    def raw_fetch(self, key: str, size: int, buffer: bytearray) -> int: ...

    def raw_fetch_tuned(self, key: str, size: int, buffer: bytearray) -> int:
        raise NotImplementedError(f"{self.name}: the default peer already reads as the plugin")

    @abstractmethod
    def raw_delete(self, key: str) -> None: ...

    def stop(self) -> None:
        self.service.kill()


class S3(Backend):
    name = "s3"
    peer_upload = "boto3 upload_file"
    peer_fetch = "boto3 get_object"
    fetch_tuning = (
        "none: the default already reads as the plugin (one get_object, drained 1 MiB at a time)"
    )

    def start(self, directory: Path) -> None:
        from services.seaweedfs import create_bucket, s3_client, start_seaweedfs

        self.service = start_seaweedfs(directory)
        create_bucket(self.service, BUCKET)
        self.client = s3_client(self.service)

    def rsm(self) -> ObjectStoreRemoteStorageManager:
        from tierlog_rsm_s3 import S3RemoteStorageManager

        rsm = S3RemoteStorageManager()
        rsm.configure(
            {
                "s3.bucket.name": BUCKET,
                "s3.endpoint.url": self.service.url,
                "s3.path.style.access.enabled": "true",
                "s3.region": "us-east-1",
                "aws.access.key.id": "tierlog-test-access",
                "aws.secret.access.key": "tierlog-test-secret",
            }
        )
        return rsm

    def memory_bound(self, rsm: ObjectStoreRemoteStorageManager) -> tuple[int, str]:
        part, parallelism = rsm.config.upload_part_size, rsm.config.upload_parallelism
        return part * parallelism, f"part {part / MIB:g} MiB x {parallelism}"

    def raw_upload(self, path: Path, key: str) -> None:
        self.client.upload_file(str(path), BUCKET, key)

    def raw_fetch(self, key: str, size: int, buffer: bytearray) -> int:
        body = self.client.get_object(Bucket=BUCKET, Key=key)["Body"]
        try:
            return drain(body, buffer)
        finally:
            body.close()

    def raw_delete(self, key: str) -> None:
        self.client.delete_object(Bucket=BUCKET, Key=key)

    def stop(self) -> None:
        from services.seaweedfs import remove_grpc_sockets

        self.service.kill()
        remove_grpc_sockets(self.service)


class Gcs(Backend):
    name = "gcs"
    peer_upload = "upload_from_filename"
    peer_fetch = "download_to_file"

    def start(self, directory: Path) -> None:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage
        from services.fake_gcs import create_bucket, start_fake_gcs

        self.service = start_fake_gcs(directory)
        create_bucket(self.service, BUCKET)
        self.client = storage.Client(
            project="test",
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            client_options={"api_endpoint": self.service.url},
        )
        self.bucket = self.client.bucket(BUCKET)

    def rsm(self) -> ObjectStoreRemoteStorageManager:
        from tierlog_rsm_gcs import GcsRemoteStorageManager

        rsm = GcsRemoteStorageManager()
        rsm.configure(
            {
                "gcs.bucket.name": BUCKET,
                "gcs.endpoint.url": self.service.url,
                "gcs.credentials.default": "false",
                "gcs.resumable.upload.chunk.size": str(GCS_CHUNK),
            }
        )
        return rsm

    def memory_bound(self, rsm: ObjectStoreRemoteStorageManager) -> tuple[int, str]:
        chunk = int(cast(Any, rsm.backend).settings.chunk_size)
        return chunk, f"one {chunk / MIB:g} MiB resumable chunk"  # sent one at a time

    def raw_upload(self, path: Path, key: str) -> None:
        self.bucket.blob(key, chunk_size=GCS_CHUNK).upload_from_filename(str(path))

    def raw_fetch(self, key: str, size: int, buffer: bytearray) -> int:
        return discarded(self.bucket.blob(key).download_to_file)

    peer_fetch_tuned = "download_to_file no MD5"
    fetch_tuning = (
        "download_to_file(checksum=None, raw_download=True): one GET of the stored bytes, no "
        "MD5, as GcsBackend.get (Accept-Encoding: identity, no digest on reads); the SDK reads "
        "the body 8 KiB at a time, a constant no option changes"
    )

    def raw_fetch_tuned(self, key: str, size: int, buffer: bytearray) -> int:
        blob = self.bucket.blob(key)
        return discarded(lambda sink: blob.download_to_file(sink, checksum=None, raw_download=True))

    def raw_delete(self, key: str) -> None:
        self.bucket.blob(key).delete()


class Azure(Backend):
    name = "azure"
    peer_upload = "upload_blob"
    peer_fetch = "download_blob.readinto"

    def start(self, directory: Path) -> None:
        from azure.storage.blob import BlobServiceClient
        from services.azurite import create_container, start_azurite

        self.service = start_azurite(directory)
        create_container(self.service, BUCKET)
        self.client = BlobServiceClient.from_connection_string(
            str(self.service.extra["connection_string"])
        )
        self.container = self.client.get_container_client(BUCKET)
        self.tuned: dict[int, Any] = {}

    def rsm(self) -> ObjectStoreRemoteStorageManager:
        from services.azurite import ACCOUNT_KEY, ACCOUNT_NAME, blob_endpoint
        from tierlog_rsm_azure import AzureRemoteStorageManager

        rsm = AzureRemoteStorageManager()
        rsm.configure(
            {
                "azure.container.name": BUCKET,
                "azure.account.name": ACCOUNT_NAME,
                "azure.account.key": ACCOUNT_KEY,
                "azure.endpoint.url": blob_endpoint(self.service),
            }
        )
        return rsm

    def memory_bound(self, rsm: ObjectStoreRemoteStorageManager) -> tuple[int, str]:
        block = int(cast(Any, rsm.backend).settings.upload_block_size)
        parallelism = rsm.config.upload_parallelism
        return block * parallelism, f"block {block / MIB:g} MiB x {parallelism}"

    def raw_upload(self, path: Path, key: str) -> None:
        with path.open("rb") as f:
            self.container.upload_blob(key, f, overwrite=True)

    def raw_fetch(self, key: str, size: int, buffer: bytearray) -> int:
        return discarded(self.container.download_blob(key).readinto)

    peer_fetch_tuned = "download_blob one GET"
    fetch_tuning = (
        "download_blob with max_single_get_size = max_chunk_get_size = the segment (one GET, as "
        "AzureBackend.get), max_concurrency=1 (one stream), connection_data_block_size = the "
        "plugin's READ_BLOCK_SIZE (1 MiB socket reads); the SDK holds the response whole where "
        "the plugin streams it"
    )

    def raw_fetch_tuned(self, key: str, size: int, buffer: bytearray) -> int:
        blob = self._tuned_client(size).get_blob_client(BUCKET, key)
        return discarded(blob.download_blob(max_concurrency=1).readinto)

    def _tuned_client(self, size: int) -> Any:
        """A client whose downloads of ``size`` bytes are one GET (made once, untimed)."""
        from azure.storage.blob import BlobServiceClient
        from tierlog_rsm_azure._transport import READ_BLOCK_SIZE

        if size not in self.tuned:
            self.tuned[size] = BlobServiceClient.from_connection_string(
                str(self.service.extra["connection_string"]),
                max_single_get_size=size,
                max_chunk_get_size=size,
                connection_data_block_size=READ_BLOCK_SIZE,
            )
        return self.tuned[size]

    def raw_delete(self, key: str) -> None:
        self.container.delete_blob(key)

    def stop(self) -> None:
        for client in self.tuned.values():
            client.close()
        self.client.close()
        self.service.kill()


FACTORIES: dict[str, Callable[[], Backend]] = {"s3": S3, "gcs": Gcs, "azure": Azure}


# Measurements -------------------------------------------------------------------------------------
def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def plugin_copy(
    rsm: ObjectStoreRemoteStorageManager, meta: RemoteLogSegmentMetadata, data: LogSegmentData
) -> Callable[[], object]:
    return lambda: rsm.copy_log_segment_data(meta, data)


def memory_pass(
    rsm: ObjectStoreRemoteStorageManager, meta: RemoteLogSegmentMetadata, data: LogSegmentData
) -> dict[str, Any]:
    """Peak RSS above the start (one pass), then the tracemalloc peak (another pass)."""
    out: dict[str, Any] = {"size": os.path.getsize(data.log_segment)}
    gc.collect()
    m = fresh_id(meta)
    if reset_peak_rss():
        before = _status_kib("VmRSS")
        rsm.copy_log_segment_data(m, data)
        peak = _status_kib("VmHWM")
        if before is not None and peak is not None:
            out["rss_peak_delta"] = (peak - before) * 1024
    else:
        rsm.copy_log_segment_data(m, data)
    rsm.delete_log_segment_data(m)
    gc.collect()
    m = fresh_id(meta)
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        rsm.copy_log_segment_data(m, data)
        _, peak_traced = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    out["tracemalloc_peak"] = peak_traced - base
    rsm.delete_log_segment_data(m)
    return out


def gets_per_fetch(
    rsm: ObjectStoreRemoteStorageManager,
    meta: RemoteLogSegmentMetadata,
    size: int,
    length: int,
    args: argparse.Namespace,
    buffer: bytearray,
    *,
    cold: bool,
) -> dict[str, Any]:
    """GET requests (the RSM's counters) per ``fetch_log_segment`` of ``length`` bytes at
    random offsets. Offsets never continue the previous read (its last chunk or the next), so
    no prefetch runs: the count is the fetch's own. ``cold``: the chunk cache is cleared before
    each fetch, so every fetch goes to the store."""
    what = "cold chunks" if cold else "chunk cache on"
    log(
        f"  [{rsm.backend.name}] {args.fetches} fetches of {length // 1024} KiB at random "
        f"offsets, manifest warm, {what} ..."
    )
    rng = random.Random(args.seed + cold)
    chunk = rsm.config.chunk_size
    per_fetch: list[int] = []
    previous_last = -10
    hits0 = rsm.metrics.snapshot().cache_hits.get("memory", 0)
    for _ in range(args.fetches):
        for _attempt in range(100):
            start = rng.randrange(0, max(1, size - length))
            if start // chunk not in (previous_last, previous_last + 1):
                break
        previous_last = min(start + length - 1, size - 1) // chunk
        if cold:
            rsm.chunk_cache.clear_memory()
        before = rsm.metrics.snapshot().count("get")
        with rsm.fetch_log_segment(meta, start, start + length - 1) as stream:
            n = drain(stream, buffer)
        if n != min(length, size - start):
            raise RuntimeError(f"{rsm.backend.name}: short ranged fetch ({n} bytes)")
        per_fetch.append(rsm.metrics.snapshot().count("get") - before)
    gets = sum(per_fetch)
    return {
        "fetches": args.fetches,
        "fetch_bytes": length,
        "gets": gets,
        "gets_per_fetch": gets / args.fetches,
        "max_gets_in_one_fetch": max(per_fetch),
        "fetches_with_no_get": sum(1 for g in per_fetch if g == 0),
        "chunk_cache_hits": rsm.metrics.snapshot().cache_hits.get("memory", 0) - hits0,
    }


def run_backend(
    backend: Backend,
    segments: dict[int, tuple[RemoteLogSegmentMetadata, LogSegmentData]],
    size_mib: int,
    memory_mib: list[int],
    args: argparse.Namespace,
) -> dict[str, Any]:
    name = backend.name
    meta, data = segments[size_mib]
    path = Path(data.log_segment)
    size = path.stat().st_size
    rsm = backend.rsm()
    buffer = bytearray(DRAIN)
    result: dict[str, Any] = {
        "segment_bytes": size,
        "peer_upload": backend.peer_upload,
        "peer_fetch": backend.peer_fetch,
        "peer_fetch_tuned": backend.peer_fetch_tuned,
    }
    try:
        # Upload, alternating raw and plugin.
        raw_up: list[float] = []
        rsm_up: list[float] = []
        rss_up: list[int] = []
        kept: RemoteLogSegmentMetadata | None = None
        raw_key = f"raw/{name}-segment.log"
        for i in range(args.repeat):
            log(f"  [{name}] upload pass {i + 1}/{args.repeat}: raw SDK ...")
            raw_up.append(timed(lambda: backend.raw_upload(path, raw_key)))
            log(f"    {size / raw_up[-1] / 1e6:,.0f} MB/s")
            log(f"  [{name}] upload pass {i + 1}/{args.repeat}: RSM copy_log_segment_data ...")
            if kept is not None:
                rsm.delete_log_segment_data(kept)
            kept = fresh_id(meta)
            gc.collect()
            reset = reset_peak_rss()
            before = _status_kib("VmRSS")
            rsm_up.append(timed(plugin_copy(rsm, kept, data)))
            peak = _status_kib("VmHWM")
            if reset and before is not None and peak is not None:
                rss_up.append((peak - before) * 1024)
            log(f"    {size / rsm_up[-1] / 1e6:,.0f} MB/s")
        assert kept is not None
        result["upload"] = {
            "rsm_seconds": min(rsm_up),
            "raw_seconds": min(raw_up),
            "rsm_mb_per_s": size / min(rsm_up) / 1e6,
            "raw_mb_per_s": size / min(raw_up) / 1e6,
            "rsm_passes_seconds": rsm_up,
            "raw_passes_seconds": raw_up,
            "ratio": min(raw_up) / min(rsm_up),
            "goal_ratio": GOAL_UPLOAD_RATIO,
        }

        # Fetch of the whole segment, manifest warm.
        with rsm.fetch_log_segment(kept, 0, 0) as s:
            s.read()

        def plugin_fetch() -> int:
            with rsm.fetch_log_segment(kept, 0) as stream:
                return drain(stream, buffer)

        # Alternating passes: the raw SDK at its defaults, tuned as the plugin reads (where
        # that differs), the RSM.
        fetches: dict[str, Callable[[], int]] = {
            f"raw SDK ({backend.peer_fetch})": lambda: backend.raw_fetch(raw_key, size, buffer)
        }
        if backend.peer_fetch_tuned is not None:
            fetches[f"raw SDK tuned ({backend.peer_fetch_tuned})"] = lambda: (
                backend.raw_fetch_tuned(raw_key, size, buffer)
            )
        fetches["RSM fetch_log_segment"] = plugin_fetch
        passes: dict[str, list[float]] = {what: [] for what in fetches}
        for i in range(args.repeat):
            for what, fetch in fetches.items():
                log(f"  [{name}] fetch pass {i + 1}/{args.repeat}: {what} ...")
                t0 = time.perf_counter()
                n = fetch()
                passes[what].append(time.perf_counter() - t0)
                if n != size:
                    raise RuntimeError(f"{name}: {what} read {n} of {size} bytes")
                log(f"    {size / passes[what][-1] / 1e6:,.0f} MB/s")
        raw_fetch, rsm_fetch = passes[next(iter(passes))], passes["RSM fetch_log_segment"]
        result["fetch"] = {
            "rsm_seconds": min(rsm_fetch),
            "raw_seconds": min(raw_fetch),
            "rsm_mb_per_s": size / min(rsm_fetch) / 1e6,
            "raw_mb_per_s": size / min(raw_fetch) / 1e6,
            "rsm_passes_seconds": rsm_fetch,
            "raw_passes_seconds": raw_fetch,
            "ratio": min(raw_fetch) / min(rsm_fetch),
            "goal_ratio": GOAL_FETCH_RATIO,
            # Against the raw SDK tuned as the plugin reads (how: ``tuning``); None where the
            # default already reads so (S3), the ratio above then being that comparison.
            "tuned": None,
            "tuning": backend.fetch_tuning,
        }
        if backend.peer_fetch_tuned is not None:
            tuned = passes[f"raw SDK tuned ({backend.peer_fetch_tuned})"]
            result["fetch"]["tuned"] = {
                "peer": backend.peer_fetch_tuned,
                "raw_seconds": min(tuned),
                "raw_mb_per_s": size / min(tuned) / 1e6,
                "raw_passes_seconds": tuned,
                "ratio": min(tuned) / min(rsm_fetch),
            }

        # GETs per 1 MiB fetch at a random offset, manifest warm: chunks cold (the memory
        # cache cleared before each fetch), then with the chunk cache as it fills.
        length = args.fetch_kib * 1024
        result["gets"] = {
            "cold": gets_per_fetch(rsm, kept, size, length, args, buffer, cold=True),
            "cached": gets_per_fetch(rsm, kept, size, length, args, buffer, cold=False),
            "goal_gets_per_fetch": GOAL_GETS_PER_FETCH,
        }
        rsm.delete_log_segment_data(kept)
        with contextlib.suppress(Exception):
            backend.raw_delete(raw_key)

        # Peak memory during upload at each size.
        memory: list[dict[str, Any]] = []
        for mib in memory_mib:
            log(f"  [{name}] peak memory during the upload of {mib} MiB ...")
            m_meta, m_data = segments[mib]
            found = memory_pass(rsm, m_meta, m_data)
            if mib == size_mib and rss_up:
                found["rss_peak_delta_timed_passes"] = max(rss_up)
            memory.append(found)
            log(
                f"    tracemalloc {found['tracemalloc_peak'] / MIB:,.1f} MiB, RSS +"
                f"{found.get('rss_peak_delta', 0) / MIB:,.1f} MiB"
            )
        bound, made_of = backend.memory_bound(rsm)
        for m in memory:
            m["beyond_bound"] = m["tracemalloc_peak"] - bound
        peaks = [m["tracemalloc_peak"] for m in memory]
        result["memory"] = {
            "bound_bytes": bound,
            "bound": made_of,
            "allowance_bytes": MEMORY_ALLOWANCE,
            "sizes": memory,
            "within_bound": all(p <= bound + MEMORY_ALLOWANCE for p in peaks),
            "growth": peaks[-1] / peaks[0],
            # What the largest size needs beyond the smallest's peak or the bound (a segment
            # smaller than parallelism parts peaks below the bound, legitimately).
            "growth_beyond_bytes": peaks[-1] - max(peaks[0], bound),
            "bounded": peaks[-1] - max(peaks[0], bound) <= MEMORY_ALLOWANCE,
        }
        requests = rsm.metrics.snapshot().requests
        result["request_counts"] = {f"{op}/{out}": n for (op, out), n in sorted(requests.items())}
    finally:
        rsm.close()
    return result


# Output -------------------------------------------------------------------------------------------


def chart(results: dict[str, Any], path: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    names = list(results["backends"])
    if not names:
        return False
    per = results["backends"]
    fig, axes = plt.subplots(1, 4, figsize=(18, 4.5))
    x = list(range(len(names)))

    def compare(ax: Any, key: str, title: str, goal: float) -> None:
        """The raw SDK at its defaults, tuned as the plugin reads (where measured), the RSM;
        the ratios (RSM over each peer) under each backend's name."""
        figures = [per[n][key] for n in names]
        tuned = [f.get("tuned") for f in figures]
        series: list[tuple[str, list[float], dict[str, Any]]] = [
            ("raw SDK, defaults", [f["raw_mb_per_s"] for f in figures], {"color": "#888"})
        ]
        if any(tuned):
            series.append(
                (
                    "raw SDK tuned as the plugin reads",
                    [t["raw_mb_per_s"] if t else 0.0 for t in tuned],
                    {"color": "#ccc", "edgecolor": "#666", "hatch": ".."},
                )
            )
        series.append(("tierlog RSM", [f["rsm_mb_per_s"] for f in figures], {"color": "#2a7"}))
        w = 0.8 / len(series)
        for j, (label, values, style) in enumerate(series):
            xs = [i + (j - (len(series) - 1) / 2) * w for i in x]
            ax.bar(xs, values, w, label=label, **style)
            for xi, v in zip(xs, values, strict=True):
                if v:
                    ax.text(xi, v, f"{v:,.0f}", ha="center", va="bottom", fontsize=7)
                else:  # no tuned variant: the defaults already read as the plugin
                    ax.text(xi, 0, "defaults\nread as\nthe plugin", ha="center", fontsize=6)
        ticks = []
        for n, f, t in zip(names, figures, tuned, strict=True):
            ratios = f"{f['ratio']:.2f}x" + (f", tuned {t['ratio']:.2f}x" if t else "")
            ticks.append(f"{n}\n{ratios}")
        ax.set_xticks(x, ticks, fontsize=8)
        ax.set_ylabel("MB/s")
        ax.set_title(f"{title}, {results['size_mib']} MiB segment\n(ratio; goal >= {goal})")
        ax.set_ylim(0, max(max(values) for _, values, _ in series) * 1.4)  # room for the legend
        ax.legend(fontsize=7, loc="upper left")

    compare(axes[0], "upload", "Upload", GOAL_UPLOAD_RATIO)
    compare(axes[1], "fetch", "Fetch whole segment", GOAL_FETCH_RATIO)
    ax = axes[2]
    sizes = results["memory_mib"]
    width = 0.8 / (len(sizes) + 1)
    for j, mib in enumerate(sizes):
        vals = [per[n]["memory"]["sizes"][j]["tracemalloc_peak"] / MIB for n in names]
        ax.bar(
            [i + (j - len(sizes) / 2) * width for i in x],
            vals,
            width,
            label=f"tracemalloc, {mib} MiB segment",
        )
    bounds = [per[n]["memory"]["bound_bytes"] / MIB for n in names]
    ax.bar(
        [i + (len(sizes) / 2) * width for i in x],
        bounds,
        width,
        color="#ccc",
        label="bound (part x parallelism; GCS: one chunk)",
    )
    ax.set_xticks(x, names)
    ax.set_ylabel("MiB")
    ax.set_title("Peak Python memory during upload")
    ax.set_ylim(0, ax.get_ylim()[1] * 1.4)  # room for the legend
    ax.legend(fontsize=7, loc="upper left")
    ax = axes[3]
    w = 0.38
    cold = [per[n]["gets"]["cold"]["gets_per_fetch"] for n in names]
    cached = [per[n]["gets"]["cached"]["gets_per_fetch"] for n in names]
    ax.bar([i - w / 2 for i in x], cold, w, color="#2a7", label="chunks cold")
    ax.bar([i + w / 2 for i in x], cached, w, color="#6c9", label="chunk cache on")
    ax.axhline(GOAL_GETS_PER_FETCH, color="C3", linestyle="--", label="goal")
    ax.set_xticks(x, names)
    ax.set_ylabel("GETs per fetch")
    ax.set_title(f"GETs per {results['fetch_kib']} KiB random fetch\n(manifest warm)")
    ax.legend(fontsize=8)
    return save_chart(fig, path, results)


def print_table(results: dict[str, Any], *, quick: bool) -> None:
    judge = functools.partial(verdict, quick=quick)
    print(
        f"\nObject-store RSMs vs raw SDKs — Python {results['python']}, {results['cpus']} CPUs; "
        f"a {results['size_mib']} MiB segment (the issue's figure is 1 GiB: --size-mib 1024; "
        f"the default is smaller for time); best of {results['repeat']}, local servers "
        "(SeaweedFS, fake-gcs-server, Azurite) on this machine"
    )
    print(
        f"  {'figure':30s} {'tierlog':>10s}  {'peer':>24s} {'value':>9s}  {'ratio':>6s}  "
        f"{'goal':>9s}"
    )
    for name, r in results["backends"].items():
        u, f, g, m = r["upload"], r["fetch"], r["gets"], r["memory"]
        print(
            f"  {name + ' upload (MB/s)':30s} {u['rsm_mb_per_s']:>10,.0f}  "
            f"{r['peer_upload']:>24s} {u['raw_mb_per_s']:>9,.0f}  {u['ratio']:>6.2f}  "
            f"{'>= ' + str(GOAL_UPLOAD_RATIO):>9s}  {judge(u['ratio'], GOAL_UPLOAD_RATIO)}"
        )
        print(
            f"  {name + ' fetch (MB/s)':30s} {f['rsm_mb_per_s']:>10,.0f}  "
            f"{r['peer_fetch']:>24s} {f['raw_mb_per_s']:>9,.0f}  {f['ratio']:>6.2f}  "
            f"{'>= ' + str(GOAL_FETCH_RATIO):>9s}  {judge(f['ratio'], GOAL_FETCH_RATIO)}"
        )
        t = f.get("tuned")
        if t is not None:
            print(
                f"  {name + ' fetch, SDK tuned (MB/s)':30s} {f['rsm_mb_per_s']:>10,.0f}  "
                f"{t['peer']:>24s} {t['raw_mb_per_s']:>9,.0f}  {t['ratio']:>6.2f}  "
                f"{'>= ' + str(GOAL_FETCH_RATIO):>9s}  {judge(t['ratio'], GOAL_FETCH_RATIO)}"
            )
        bound = m["bound_bytes"] / MIB
        allowance = m["allowance_bytes"]
        for s in m["sizes"]:
            rss = s.get("rss_peak_delta")
            rss_txt = f", RSS +{rss / MIB:,.1f}" if rss is not None else ""
            peak = s["tracemalloc_peak"] / MIB
            beyond = s["tracemalloc_peak"] - m["bound_bytes"]
            print(
                f"  {name + ' upload memory (MiB)':30s} {peak:>10,.1f}  "
                f"{'bound, ' + format(s['size'] / MIB, '.0f') + ' MiB segment':>24s} "
                f"{bound:>9,.0f}  {'':>6s}  {'<= bound':>9s}  "
                f"{judge(beyond, allowance, at_most=True)} "
                f"({'+' if beyond >= 0 else '-'}{abs(beyond) / MIB:,.2f} MiB; {m['bound']})"
                f"{rss_txt}"
            )
        peaks = [s["tracemalloc_peak"] for s in m["sizes"]]
        beyond = peaks[-1] - max(peaks[0], m["bound_bytes"])
        print(
            f"  {name + ' memory growth (x)':30s} {peaks[-1] / peaks[0]:>10.2f}  "
            f"{'segment size growth':>24s} {m['sizes'][-1]['size'] / m['sizes'][0]['size']:>9.1f}"
            f"  {'':>6s}  {'bounded':>9s}  {judge(beyond, allowance, at_most=True)} "
            f"({'+' if beyond >= 0 else '-'}{abs(beyond) / MIB:,.2f} MiB)"
        )
        cold, cached = g["cold"], g["cached"]
        print(
            f"  {name + ' GETs per 1 MiB fetch':30s} {cold['gets_per_fetch']:>10.2f}  "
            f"{'max in one fetch':>24s} {cold['max_gets_in_one_fetch']:>9d}  {'':>6s}  "
            f"{'<= 1':>9s}  "
            f"{judge(cold['max_gets_in_one_fetch'], GOAL_GETS_PER_FETCH, at_most=True)}"
        )
    for name, r in results["backends"].items():
        cold, cached = r["gets"]["cold"], r["gets"]["cached"]
        print(
            f"  {name}: {cold['fetches']} random fetches with cold chunks: {cold['gets']} GETs; "
            f"with the chunk cache on: {cached['gets_per_fetch']:.2f} GETs per fetch "
            f"({cached['fetches_with_no_get']} of {cached['fetches']} served from the cache); "
            "all requests " + ", ".join(f"{k} {v}" for k, v in r["request_counts"].items())
        )
    for name, r in results["backends"].items():
        print(f"  {name} fetch, SDK tuned as the plugin reads: {r['fetch']['tuning']}")
    for name, err in results.get("errors", {}).items():
        print(f"  {name}: FAILED: {err}")
    print(
        "  memory: tracemalloc = peak Python allocations during one copy (a pass of its own); "
        "bound = the part buffers the RSM's configuration allows (part or block size x "
        "upload.parallelism; GCS: one resumable chunk); 'OK' = the peak exceeds the bound by "
        f"at most {MEMORY_ALLOWANCE / MIB:g} MiB (the SDK's and the RSM's own objects, well below "
        "one part: a part buffer too many cannot hide in it), the figure in brackets is the "
        "excess; growth: 'OK' when the peak at the largest size exceeds the larger of the "
        f"smallest's peak and the bound by at most {MEMORY_ALLOWANCE / MIB:g} MiB (in brackets). "
        "RSS = peak RSS above the RSS before the "
        "copy (VmHWM reset), for information only: the allocator reuses memory freed by earlier "
        f"passes, so it can read below the Python peak; total run {results['total_seconds']:.0f} s"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", default=",".join(BACKENDS), help="s3,gcs,azure")
    parser.add_argument(
        "--size-mib", type=int, default=256, help="segment size (MiB; the issue's figure is 1024)"
    )
    parser.add_argument(
        "--memory-mib",
        default=None,
        help="segment sizes of the memory figure (default: 64,<size-mib>)",
    )
    parser.add_argument("--fetch-kib", type=int, default=1024, help="bytes per random fetch")
    parser.add_argument("--fetches", type=int, default=50, help="random fetches counted")
    parser.add_argument("--batch-kib", type=int, default=16, help="producer batch size (KiB)")
    parser.add_argument("--pool-mib", type=int, default=8, help="distinct batches to cycle")
    parser.add_argument("--repeat", type=int, default=2, help="passes of each kind (best kept)")
    args, out = parse_args(
        parser, {"size_mib": 16, "fetches": 10, "pool_mib": 1, "repeat": 1}, argv
    )
    names = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [n for n in names if n not in FACTORIES]
    if unknown or not names:
        parser.error(f"unknown backends {unknown}: choose among {', '.join(BACKENDS)}")
    if args.memory_mib is None:
        memory_mib = sorted({min(64, args.size_mib // 2) or 1, args.size_mib})
    else:
        memory_mib = sorted({int(m) for m in args.memory_mib.split(",")})
    workdir = Path(tempfile.mkdtemp(prefix="tierlog-rsm-bench-", dir=args.dir))
    results: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "size_mib": args.size_mib,
        "memory_mib": memory_mib,
        "fetch_kib": args.fetch_kib,
        "repeat": args.repeat,
        "issue_size_mib": 1024,
        "backends": {},
        "errors": {},
    }
    started = time.perf_counter()
    logs: list[LocalLog] = []
    try:
        log(f"building a {args.pool_mib} MiB pool of {args.batch_kib} KiB batches ...")
        pool, _, _, _ = make_batches(
            random.Random(args.seed), CompressionType.NONE, args.pool_mib * MIB, args.batch_kib
        )
        segments: dict[int, tuple[RemoteLogSegmentMetadata, LogSegmentData]] = {}
        for mib in sorted({args.size_mib, *memory_mib}):
            local, meta, data = build_segment(workdir / "logs" / f"bench{mib}-0", pool, mib * MIB)
            logs.append(local)
            segments[mib] = (meta, data)
        del pool
        for name in names:
            backend = FACTORIES[name]()
            log(f"starting the {name} server ...")
            try:
                backend.start(workdir / name)
            except Exception as exc:
                log(f"  could not start the {name} server: {exc}")
                results["errors"][name] = f"{NO_SERVER}: {exc}"
                continue
            try:
                results["backends"][name] = run_backend(
                    backend, segments, args.size_mib, memory_mib, args
                )
            except Exception as exc:
                log(f"  {name} failed: {exc!r}")
                results["errors"][name] = repr(exc)
            finally:
                backend.stop()
    finally:
        for local in logs:
            local.close()
        drop_workdir(args, workdir)
    results["total_seconds"] = time.perf_counter() - started
    print_table(results, quick=args.quick)
    write_results(out, "rsm", results, chart, quick=args.quick)
    started_but_failed = [n for n, e in results["errors"].items() if not e.startswith(NO_SERVER)]
    return 1 if started_but_failed else 0


if __name__ == "__main__":
    sys.exit(main())
