"""Plugin discovery: entry points, lazy loading, failure isolation, strict mode, selection."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from tierlog.spi import PluginError, RemoteLogMetadataManager, RemoteStorageManager
from tierlog.spi.plugins import PluginRegistry, class_path

MakeDist = Callable[..., None]


@pytest.fixture
def make_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> MakeDist:
    """Install a throwaway distribution (dist-info + modules) on sys.path."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def make(name: str, entry_points: dict[str, str], modules: dict[str, str]) -> None:
        info = tmp_path / f"{name.replace('-', '_')}-1.2.3.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.2.3\n")
        lines = "\n".join(f"{k} = {v}" for k, v in entry_points.items())
        (info / "entry_points.txt").write_text(f"[tierlog]\n{lines}\n")
        for module, source in modules.items():
            (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))

    return make


GOOD_PLUGIN = """
    from tierlog import hookimpl
    from tierlog.storage.local import LocalTieredStorage

    class GoodStorage(LocalTieredStorage):
        pass

    @hookimpl
    def tierlog_register_storage_managers(register):
        register("good", GoodStorage)
"""


def test_builtins_are_registered_through_the_same_hooks() -> None:
    registry = PluginRegistry(only=[])
    assert registry.storage_managers["local"].class_path == (
        "tierlog.storage.local:LocalTieredStorage"
    )
    assert registry.storage_managers["local"].distribution == "tierlog"
    assert registry.metadata_managers["embedded"].class_path == (
        "tierlog.metadata.embedded:EmbeddedRemoteLogMetadataManager"
    )
    assert registry.failures == []


def test_third_party_plugin_found_by_entry_point(make_dist: MakeDist) -> None:
    make_dist("tierlog-good", {"good": "tl_good_plugin"}, {"tl_good_plugin": GOOD_PLUGIN})
    registry = PluginRegistry()
    info = registry.storage_managers["good"]
    assert (info.kind, info.distribution, info.version, info.plugin) == (
        "rsm",
        "tierlog-good",
        "1.2.3",
        "good",
    )
    assert info.class_path == "tl_good_plugin:GoodStorage"
    assert issubclass(registry.storage_manager_class("good"), RemoteStorageManager)


def test_loading_is_lazy(make_dist: MakeDist) -> None:
    make_dist(
        "tierlog-lazy",
        {"lazy": "tl_lazy_plugin"},
        {"tl_lazy_plugin": "raise RuntimeError('imported too early')\n"},
    )
    registry = PluginRegistry()  # constructing must not import anything
    assert registry.failures  # first query imports, and the failure is recorded


def test_broken_plugin_is_reported_and_skipped(
    make_dist: MakeDist, caplog: pytest.LogCaptureFixture
) -> None:
    make_dist(
        "tierlog-broken",
        {"broken": "tl_broken_plugin", "good": "tl_good_plugin2"},
        {"tl_broken_plugin": "import does_not_exist_anywhere\n", "tl_good_plugin2": GOOD_PLUGIN},
    )
    registry = PluginRegistry()
    assert "good" in registry.storage_managers
    (failure,) = registry.failures
    assert failure.plugin == "broken" and failure.distribution == "tierlog-broken"
    assert "does_not_exist_anywhere" in failure.error
    assert "broken" in caplog.text


def test_strict_mode_makes_a_broken_plugin_an_error(
    make_dist: MakeDist, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_dist(
        "tierlog-broken2",
        {"broken2": "tl_broken_plugin2"},
        {"tl_broken_plugin2": "import does_not_exist_anywhere\n"},
    )
    monkeypatch.setenv("TIERLOG_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match=r"broken2.*does_not_exist_anywhere"):
        _ = PluginRegistry().storage_managers


def test_allow_list_by_environment(make_dist: MakeDist, monkeypatch: pytest.MonkeyPatch) -> None:
    make_dist(
        "tierlog-two",
        {"one": "tl_one", "two": "tl_two"},
        {"tl_one": GOOD_PLUGIN, "tl_two": "raise SystemError('must not load')\n"},
    )
    monkeypatch.setenv("TIERLOG_LOAD_PLUGINS", "one")
    registry = PluginRegistry()
    assert "good" in registry.storage_managers and "local" in registry.storage_managers
    assert registry.failures == []


def test_misspelled_hook_is_refused(make_dist: MakeDist) -> None:
    make_dist(
        "tierlog-typo",
        {"typo": "tl_typo"},
        {
            "tl_typo": """
        from tierlog import hookimpl

        @hookimpl
        def tierlog_register_storage_manager(register):
            pass
    """
        },
    )
    (failure,) = PluginRegistry().failures
    assert failure.plugin == "typo" and "tierlog_register_storage_manager" in failure.error


def test_name_conflict_is_reported_first_wins(make_dist: MakeDist) -> None:
    make_dist(
        "tierlog-dup",
        {"dup": "tl_dup"},
        {
            "tl_dup": """
        from tierlog import hookimpl
        from tierlog.storage.local import LocalTieredStorage

        class Impostor(LocalTieredStorage):
            pass

        @hookimpl
        def tierlog_register_storage_managers(register):
            register("local", Impostor)
    """
        },
    )
    registry = PluginRegistry()
    assert registry.storage_managers["local"].class_path == (
        "tierlog.storage.local:LocalTieredStorage"
    )
    (failure,) = registry.failures
    assert "already registered" in failure.error


def test_registering_a_non_plugin_class_is_reported(make_dist: MakeDist) -> None:
    make_dist(
        "tierlog-wrong",
        {"wrong": "tl_wrong"},
        {
            "tl_wrong": """
        from tierlog import hookimpl

        @hookimpl
        def tierlog_register_metadata_managers(register):
            register("wrong", dict)
    """
        },
    )
    registry = PluginRegistry()
    assert "wrong" not in registry.metadata_managers
    assert "not a RemoteLogMetadataManager" in registry.failures[0].error


def test_select_by_class_path() -> None:
    registry = PluginRegistry(only=[])
    cls = registry.metadata_manager_class(
        "tierlog.metadata.embedded:EmbeddedRemoteLogMetadataManager"
    )
    assert issubclass(cls, RemoteLogMetadataManager)
    assert class_path(cls) == "tierlog.metadata.embedded:EmbeddedRemoteLogMetadataManager"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("nope", "no rsm plugin named 'nope' \\(registered: .*local"),
        ("no_such_module_x:Foo", "cannot import module 'no_such_module_x'"),
        ("tierlog.spi:NoSuchClass", "has no 'NoSuchClass'"),
        ("tierlog.spi:Uuid", "not a subclass of RemoteStorageManager"),
        (
            "tierlog.metadata.embedded:EmbeddedRemoteLogMetadataManager",
            "not a subclass of RemoteStorageManager",
        ),
    ],
)
def test_selection_errors_name_the_problem(name: str, message: str) -> None:
    with pytest.raises(PluginError, match=message):
        PluginRegistry(only=[]).storage_manager_class(name)


def test_in_process_plugin_registration() -> None:
    from tierlog import hookimpl
    from tierlog.storage.local import LocalTieredStorage

    class Mine(LocalTieredStorage):
        pass

    class Plugin:
        @hookimpl
        def tierlog_register_storage_managers(self, register: Callable[[str, type], None]) -> None:
            register("mine", Mine)

    registry = PluginRegistry(only=[])
    registry.register_plugin(Plugin(), "mine-plugin")
    assert registry.storage_manager_class("mine") is Mine


def test_abstract_class_is_refused_naming_missing_methods(make_dist: MakeDist) -> None:
    make_dist(
        "tierlog-half",
        {"half": "tl_half"},
        {
            "tl_half": """
        from tierlog import hookimpl
        from tierlog.spi import RemoteStorageManager

        class Half(RemoteStorageManager):
            def configure(self, configs):
                pass

        @hookimpl
        def tierlog_register_storage_managers(register):
            register("half", Half)
    """
        },
    )
    registry = PluginRegistry()
    assert "half" not in registry.storage_managers
    (failure,) = registry.failures
    assert "is abstract" in failure.error and "copy_log_segment_data" in failure.error
    with pytest.raises(PluginError, match=r"is abstract.*fetch_index"):
        registry.storage_manager_class("tl_half:Half")


def test_a_plugin_registers_all_or_nothing(make_dist: MakeDist) -> None:
    make_dist(
        "tierlog-mixed",
        {"mixed": "tl_mixed"},
        {
            "tl_mixed": """
        from tierlog import hookimpl
        from tierlog.storage.local import LocalTieredStorage

        class Fine(LocalTieredStorage):
            pass

        @hookimpl
        def tierlog_register_storage_managers(register):
            register("fine", Fine)
            register("bad", object)
    """
        },
    )
    registry = PluginRegistry()
    assert "fine" not in registry.storage_managers
    assert "not a RemoteStorageManager" in registry.failures[0].error


def test_entry_point_name_already_taken_is_reported(make_dist: MakeDist) -> None:
    make_dist("tierlog-squatter", {"local": "tl_squatter"}, {"tl_squatter": GOOD_PLUGIN})
    registry = PluginRegistry()
    assert "good" not in registry.storage_managers
    (failure,) = registry.failures
    assert failure.distribution == "tierlog-squatter" and "already taken" in failure.error


def test_strict_mode_keeps_failing_instead_of_half_loading(
    make_dist: MakeDist, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_dist(
        "tierlog-broken3", {"broken3": "tl_broken3"}, {"tl_broken3": "raise RuntimeError('boom')\n"}
    )
    registry = PluginRegistry(strict=True)
    for _ in range(2):
        with pytest.raises(PluginError, match="boom"):
            _ = registry.storage_managers


def test_class_path_import_failure_is_a_plugin_error(make_dist: MakeDist) -> None:
    make_dist("tierlog-explodes", {}, {"tl_explodes": "raise ZeroDivisionError('at import')\n"})
    with pytest.raises(PluginError, match="ZeroDivisionError: at import"):
        PluginRegistry(only=[]).storage_manager_class("tl_explodes:Thing")
