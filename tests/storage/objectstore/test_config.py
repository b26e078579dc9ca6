"""The common ``rsm.config.`` keys: documented defaults and validation naming the key."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tierlog.properties import ConfigValueError, parse_bool
from tierlog.spi import ConfigError, IllegalStateError, RemoteStorageException
from tierlog.storage.objectstore import CONFIG_KEYS, MemoryObjectStoreRSM, ObjectStoreConfig
from tierlog.storage.objectstore.config import MiB, get_bool


def test_defaults_are_the_documented_ones() -> None:
    parsed = ObjectStoreConfig.from_configs({})
    assert parsed == ObjectStoreConfig()
    documented = {k.name: k.default for k in CONFIG_KEYS}
    assert documented["chunk.size"] == str(parsed.chunk_size) == str(4 * MiB)
    assert documented["upload.part.size"] == str(parsed.upload_part_size) == str(8 * MiB)
    assert documented["upload.multipart.threshold"] == str(parsed.upload_multipart_threshold)
    assert documented["upload.parallelism"] == str(parsed.upload_parallelism) == "4"
    assert documented["fetch.chunk.cache.size"] == str(parsed.fetch_chunk_cache_size)
    assert documented["fetch.prefetch.chunks"] == str(parsed.fetch_prefetch_chunks) == "1"
    assert documented["fetch.manifest.cache.entries"] == "1000"
    assert documented["compression.enabled"] == "false" and not parsed.compression_enabled
    assert documented["encryption.key.provider"] == parsed.encryption_key_provider == "file"
    assert ObjectStoreConfig.keys() == frozenset(documented)
    assert all(k.doc for k in CONFIG_KEYS)


def test_the_table_names_each_field_with_its_type() -> None:
    """Each documented key is the ``ObjectStoreConfig`` field of its snake_case name, of the
    type the table gives (paths are strings in a properties file)."""
    python_types = {"boolean": bool, "int": int, "long": int, "string": (str, Path, type(None))}
    parsed = ObjectStoreConfig.from_configs(
        {"fetch.disk.cache.dir": "/tmp/c", "encryption.key.file": "/tmp/k.json"}
    )
    for key in CONFIG_KEYS:
        value = getattr(parsed, key.attr)
        assert isinstance(value, python_types[key.kind]), (key.name, value)
        assert isinstance(value, bool) == (key.kind == "boolean"), key.name


def test_values_are_parsed() -> None:
    parsed = ObjectStoreConfig.from_configs(
        {
            "key.prefix": "tiered/",
            "key.prefix.entropy.chars": "4",
            "chunk.size": "1048576",
            "upload.part.size": str(16 * MiB),
            "upload.parallelism": "8",
            "upload.rate.limit.bytes.per.second": "1000000",
            "fetch.disk.cache.dir": "/var/cache/t",
            "compression.enabled": "TRUE",
            "compression.level": "-3",
        }
    )
    assert parsed.key_prefix == "tiered/" and parsed.key_prefix_entropy_chars == 4
    assert parsed.upload_settings().part_size == 16 * MiB
    assert parsed.upload_settings().parallelism == 8
    assert parsed.fetch_disk_cache_dir == Path("/var/cache/t")
    assert parsed.compression_enabled and parsed.compression_level == -3


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("chunk.size", "4MiB", "must be an integer"),
        ("chunk.size", "100", "between 1024"),
        ("upload.part.size", str(4 * MiB), "S3's minimum part is 5 MiB"),
        ("upload.parallelism", "0", "between 1 and 64"),
        ("upload.rate.limit.bytes.per.second", "-1", "at least 0"),
        ("key.prefix.entropy.chars", "65", "between 0 and 64"),
        ("key.prefix", "x" * 126, "at most 125"),
        ("key.prefix", "a\nb", "control characters"),
        ("compression.enabled", "yes", "true or false"),
        ("compression.level", "23", "between -7 and 22"),
        ("encryption.enabled", "1", "true or false"),
        ("encryption.key.provider", "kms", "module:Class"),
        ("fetch.disk.cache.size", "0", "at least 1"),
        ("fetch.prefetch.chunks", "65", "between 0 and 64"),
    ],
)
def test_bad_values_name_the_key(key: str, value: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as raised:
        ObjectStoreConfig.from_configs({key: value})
    assert f"rsm.config.{key}" in str(raised.value)


@pytest.mark.parametrize("raw", ["true", " FALSE ", "True", "yes", "1", "", "on", "tru"])
def test_booleans_follow_the_one_kafka_rule(raw: str) -> None:
    """``get_bool`` is ``tierlog.properties.parse_bool`` with a default: the same answer, or the
    same refusal naming the key as the user typed it."""
    assert get_bool({}, "compression.enabled", True) is True
    try:
        expected = parse_bool("compression.enabled", raw)
    except ConfigValueError:
        with pytest.raises(ConfigValueError, match="either true or false") as raised:
            get_bool({"compression.enabled": raw}, "compression.enabled", False)
        assert raised.value.key == "rsm.config.compression.enabled"
    else:
        assert get_bool({"compression.enabled": raw}, "compression.enabled", not expected) is (
            expected
        )


def test_encryption_with_the_file_provider_needs_a_key_file() -> None:
    with pytest.raises(ConfigError, match=r"rsm\.config\.encryption\.key\.file"):
        ObjectStoreConfig.from_configs({"encryption.enabled": "true"})


def test_a_disk_cache_must_hold_a_chunk() -> None:
    with pytest.raises(ConfigError, match="at least one chunk"):
        ObjectStoreConfig.from_configs(
            {
                "fetch.disk.cache.dir": "/tmp/x",
                "fetch.disk.cache.size": "2048",
                "chunk.size": "4096",
            }
        )


def test_configure_reports_unknown_keys_but_not_the_plugins_or_the_rlms(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rsm = MemoryObjectStoreRSM()
    with caplog.at_level(logging.WARNING):
        rsm.configure({"memory.store": "cfg", "node.id": "1", "chunk.sise": "1", "bogus": "x"})
    assert rsm.ignored_configs == ("bogus", "chunk.sise")
    assert "chunk.sise" in caplog.text and "memory.store" not in rsm.ignored_configs
    rsm.close()
    MemoryObjectStoreRSM.drop_store("cfg")


def test_configure_fails_on_a_missing_bucket_and_may_not_be_repeated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rsm = MemoryObjectStoreRSM()
    rsm.configure({"memory.store": "cfg2"})
    with pytest.raises(IllegalStateError, match="only be called once"):
        rsm.configure({"memory.store": "cfg2"})
    rsm.close()
    rsm.close()  # a second close is harmless
    with pytest.raises(IllegalStateError, match="closed"):
        rsm.configure({})

    class NoBucket(MemoryObjectStoreRSM):
        def create_backend(self, configs, upload, observer):  # type: ignore[no-untyped-def]
            backend = super().create_backend(configs, upload, observer)
            backend.exists = False
            return backend

    with pytest.raises(RemoteStorageException, match="'cfg3' does not exist"):
        NoBucket().configure({"memory.store": "cfg3"})
    MemoryObjectStoreRSM.drop_store("cfg2")
    MemoryObjectStoreRSM.drop_store("cfg3")


def test_a_missing_keyring_fails_configure(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the keyring"):
        MemoryObjectStoreRSM().configure(
            {
                "encryption.enabled": "true",
                "encryption.key.file": str(tmp_path / "none.json"),
            }
        )


def test_the_markdown_table_lists_every_key_with_its_default() -> None:
    from tierlog.storage.objectstore.config import ConfigKey, markdown_table

    table = markdown_table([ConfigKey("x.y", "string", default="", doc="a | b"), *CONFIG_KEYS])
    rows = table.splitlines()[2:]
    assert len(rows) == len(CONFIG_KEYS) + 1
    assert rows[0] == '| `rsm.config.x.y` | `""` | a \\| b |'
    assert "| `rsm.config.chunk.size` | `4194304` |" in table
    assert "| `rsm.config.fetch.disk.cache.dir` | unset |" in table
