"""Remote segments in a clean's tasks: reading them through the RSM, uploading the output.

Tasks run where the engine puts them (this process, or a Spark executor), so they cannot be
handed the node's RSM object: they get a ``StorageSpec`` (the plugin name and its configuration)
and build the RSM once per process (``StorageSpec.open``). A remote source segment is downloaded
with ``fetch_log_segment`` into a scratch directory, streamed to disk (never held in memory),
and kept there under its segment id so that the scan and the rewrite of one round download it
once when they run on the same host; the rewrite deletes it when done.

A cleaned segment is uploaded with ``copy_log_segment_data`` under a new id derived from the id it
replaces and the leader epoch of the round (``cleaned_segment_id``): a rerun of an interrupted
round in the same epoch recreates the same id and overwrites what the interrupted attempt
uploaded; a leader of a later epoch deletes an earlier epoch's unpublished uploads once it has
published its own first round (``tiered.TieredCleaner``), so a crash between upload and
publication leaves nothing unreferenced behind for long.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tierlog.spi import (
    IndexType,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundException,
    RemoteStorageManager,
    RetriableRemoteStorageException,
    Uuid,
)

__all__ = [
    "StorageSpec",
    "cleaned_segment_id",
    "download_segment",
    "fetch_index_bytes",
]

_LOG = logging.getLogger(__name__)
_NAMESPACE = uuid.UUID("5d0a7f55-2a3b-4c1e-9f57-7c7e3d2a1272")
_COPY_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class StorageSpec:
    """How a task builds the RSM: the plugin's name (or ``module:Class``) and its configs."""

    name: str
    configs: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, name: str, configs: Mapping[str, str]) -> StorageSpec:
        return cls(name, tuple(sorted((str(k), str(v)) for k, v in configs.items())))

    def open(self) -> RemoteStorageManager:
        """This process's RSM for the spec (built and configured on first use)."""
        with _LOCK:
            rsm = _OPEN.get(self)
            if rsm is None:
                from tierlog.spi.plugins import get_registry

                rsm = get_registry().create_storage_manager(self.name, dict(self.configs))
                _OPEN[self] = rsm
            return rsm


_LOCK = threading.Lock()
_OPEN: dict[StorageSpec, RemoteStorageManager] = {}


def register_open(spec: StorageSpec, rsm: RemoteStorageManager) -> None:
    """Let tasks in this process use an RSM the caller already has (the node's own)."""
    with _LOCK:
        _OPEN[spec] = rsm


def cleaned_segment_id(source: RemoteLogSegmentId, leader_epoch: int) -> RemoteLogSegmentId:
    """The id of the cleaned segment that replaces ``source`` in a round of ``leader_epoch``."""
    derived = uuid.uuid5(_NAMESPACE, f"{source.id}:{leader_epoch}")
    return RemoteLogSegmentId(source.topic_id_partition, Uuid.from_int(derived.int))


def scratch_dir(configured: str | None) -> Path:
    """The directory downloads and cleaned outputs go to (created if needed)."""
    path = Path(configured) if configured else Path(tempfile.gettempdir()) / "tierlog-compaction"
    path.mkdir(parents=True, exist_ok=True)
    return path


def download_segment(
    rsm: RemoteStorageManager, metadata: RemoteLogSegmentMetadata, directory: Path
) -> tuple[Path, int]:
    """The segment's ``.log`` in ``directory`` (downloaded unless already there); returns the
    path and the bytes downloaded (0 when it was there)."""
    target = directory / f"{metadata.remote_log_segment_id.id}.log"
    if target.exists() and target.stat().st_size == metadata.segment_size_in_bytes:
        return target, 0
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".download")
    downloaded = 0
    try:
        with os.fdopen(fd, "wb") as out, rsm.fetch_log_segment(metadata, 0) as stream:
            while chunk := stream.read(_COPY_CHUNK):
                out.write(chunk)
                downloaded += len(chunk)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target, downloaded


def fetch_index_bytes(
    rsm: RemoteStorageManager, metadata: RemoteLogSegmentMetadata, index_type: IndexType
) -> bytes | None:
    """An index of a remote segment, or None when the segment has none.

    A plugin written before ``COMPACTION_SUMMARY`` existed may fail on that type with any
    error but a retriable one: the summary is then taken as missing (the segment is downloaded
    instead), with a warning, rather than failing the round."""
    try:
        with rsm.fetch_index(metadata, index_type) as stream:
            return stream.read()
    except RemoteResourceNotFoundException:
        return None
    except RetriableRemoteStorageException:
        raise
    except Exception as e:
        if index_type is not IndexType.COMPACTION_SUMMARY:
            raise
        _LOG.warning(
            "%s cannot fetch compaction summaries (%s: %s): segments are downloaded to be cleaned",
            type(rsm).__name__,
            type(e).__name__,
            e,
        )
        return None


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
