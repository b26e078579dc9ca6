"""The RSM conformance suite on the object-store RSM over the in-memory backend, for every
combination of transforms (plain, compressed, encrypted, both)."""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from tierlog.conformance import RemoteStorageManagerSuite
from tierlog.storage.objectstore.memory import MemoryObjectStoreRSM


def write_keyring(path: Path, active: str = "k1", ids: tuple[str, ...] = ("k1",)) -> Path:
    keys = {k: base64.b64encode(os.urandom(32)).decode() for k in ids}
    path.write_text(json.dumps({"active": active, "keys": keys}))
    return path


class _MemorySuite(RemoteStorageManagerSuite):
    plugin_class = MemoryObjectStoreRSM
    compression: ClassVar[bool] = False
    encryption: ClassVar[bool] = False

    @pytest.fixture
    def rsm_config(self, tmp_path: Path) -> Iterator[dict[str, str]]:
        store = uuid.uuid4().hex
        config = {
            "memory.store": store,
            "chunk.size": "1024",
            "compression.enabled": str(self.compression).lower(),
            # The suite's segments are random bytes: the heuristic would compress them anyway.
            "compression.heuristic.enabled": "true",
            "encryption.enabled": str(self.encryption).lower(),
        }
        if self.encryption:
            config["encryption.key.file"] = str(write_keyring(tmp_path / "keyring.json"))
        yield config
        MemoryObjectStoreRSM.drop_store(store)


class TestPlain(_MemorySuite):
    pass


class TestCompressed(_MemorySuite):
    compression = True


class TestEncrypted(_MemorySuite):
    encryption = True


class TestCompressedAndEncrypted(_MemorySuite):
    compression = True
    encryption = True
