"""A plugin's suite subclass cannot silently drop or override a standard test."""

from __future__ import annotations

import pytest

from tierlog.conformance import RemoteStorageManagerSuite
from tierlog.storage.local import LocalTieredStorage


def test_overriding_a_standard_test_without_a_reason_fails_at_definition() -> None:
    with pytest.raises(TypeError, match="overrides a standard conformance test"):

        class TestSneaky(RemoteStorageManagerSuite):
            plugin_class = LocalTieredStorage

            def test_delete_twice_succeeds(self) -> None:
                """Pretends to pass."""


def test_deleting_a_standard_test_fails_at_definition() -> None:
    with pytest.raises(TypeError, match="overrides a standard conformance test"):

        class TestDeleter(RemoteStorageManagerSuite):
            plugin_class = LocalTieredStorage
            test_delete_twice_succeeds = None


def test_an_override_with_a_reason_is_allowed() -> None:
    class TestHonest(RemoteStorageManagerSuite):
        plugin_class = LocalTieredStorage

        @pytest.mark.xfail(reason="this store cannot delete", strict=True)
        def test_delete_twice_succeeds(self) -> None:
            raise AssertionError

    assert TestHonest.plugin_class is LocalTieredStorage


def test_new_tests_of_a_plugin_are_allowed() -> None:
    class TestExtra(RemoteStorageManagerSuite):
        plugin_class = LocalTieredStorage

        def test_something_plugin_specific(self) -> None:
            pass

    assert "test_something_plugin_specific" in vars(TestExtra)
