"""A plugin's suite subclass cannot silently drop, override or shadow a standard test.

The guard looks at what pytest will run: the test that resolves on the collected class through
its MRO. The pytester runs prove that a shadowed test fails the whole run, with a message naming
the test and the class that shadows it, while the documented escape (an override marked
``xfail``/``skip`` with a reason) and helpers added by mixins still run.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tierlog.conformance import (
    ObjectStoreBackendSuite,
    RemoteLogMetadataManagerSuite,
    RemoteStorageManagerSuite,
)
from tierlog.conformance._base import SuiteBase, shadowed_standard_tests
from tierlog.storage.local import LocalTieredStorage

pytest_plugins = ["pytester"]

SUITES: list[tuple[type[SuiteBase], str]] = [
    (RemoteStorageManagerSuite, "test_delete_twice_succeeds"),
    (RemoteLogMetadataManagerSuite, "test_read_your_writes"),
    (ObjectStoreBackendSuite, "test_close_twice_is_safe"),
]
"""Every shipped suite, with one of its standard tests."""

SUITE_IDS = [suite.__name__ for suite, _ in SUITES]

OVERRIDES = "overrides a standard conformance test"


def _passing_test() -> Callable[[object], None]:
    """A replacement test that passes whatever the plugin does; a new function each time, since
    a mark applied to it sticks to the function."""

    def passes(self: object) -> None:
        pass

    return passes


def _mixin(test: str) -> type:
    """A plain mixin (not a suite subclass) whose ``test`` would pass unconditionally."""
    return type("SneakyMixin", (), {test: _passing_test()})


# At the class statement -------------------------------------------------------------------------
def test_overriding_a_standard_test_without_a_reason_fails_at_definition() -> None:
    with pytest.raises(TypeError, match=OVERRIDES):

        class TestSneaky(RemoteStorageManagerSuite):
            plugin_class = LocalTieredStorage

            def test_delete_twice_succeeds(self) -> None:
                """Pretends to pass."""


def test_deleting_a_standard_test_fails_at_definition() -> None:
    with pytest.raises(TypeError, match=OVERRIDES):

        class TestDeleter(RemoteStorageManagerSuite):
            plugin_class = LocalTieredStorage
            test_delete_twice_succeeds = None


@pytest.mark.parametrize(("suite", "test"), SUITES, ids=SUITE_IDS)
def test_a_mixin_before_the_suite_cannot_shadow_a_standard_test(
    suite: type[SuiteBase], test: str
) -> None:
    """The class's own attributes are clean; the mixin's test is what would run."""
    with pytest.raises(TypeError, match=rf"TestMine\.{test} {OVERRIDES}.*SneakyMixin\.{test}"):
        type("TestMine", (_mixin(test), suite), {})


@pytest.mark.parametrize(("suite", "test"), SUITES, ids=SUITE_IDS)
def test_a_test_replaced_after_the_class_statement_is_found(
    suite: type[SuiteBase], test: str
) -> None:
    """The class statement passed; the resolved attribute no longer is the suite's."""
    late = type("TestLate", (suite,), {})
    assert shadowed_standard_tests(late) == []
    setattr(late, test, _passing_test())
    (problem,) = shadowed_standard_tests(late)
    assert problem.startswith(f"TestLate.{test} {OVERRIDES} of {suite.__name__}: TestLate.{test}")


@pytest.mark.parametrize(("suite", "test"), SUITES, ids=SUITE_IDS)
def test_an_override_with_a_reason_is_allowed_through_a_mixin(
    suite: type[SuiteBase], test: str
) -> None:
    marked = pytest.mark.xfail(reason="this store cannot do it", strict=True)(_passing_test())
    honest = type("HonestMixin", (), {test: marked})
    assert shadowed_standard_tests(type("TestHonest", (honest, suite), {})) == []


def test_an_override_with_a_reason_is_allowed() -> None:
    class TestHonest(RemoteStorageManagerSuite):
        plugin_class = LocalTieredStorage

        @pytest.mark.xfail(reason="this store cannot delete", strict=True)
        def test_delete_twice_succeeds(self) -> None:
            raise AssertionError

    assert TestHonest.plugin_class is LocalTieredStorage


def test_an_override_marked_without_a_reason_is_refused() -> None:
    unexplained = pytest.mark.xfail(strict=True)(_passing_test())
    with pytest.raises(TypeError, match=OVERRIDES):
        type("TestVague", (RemoteStorageManagerSuite,), {"test_delete_twice_succeeds": unexplained})


def test_new_tests_of_a_plugin_are_allowed() -> None:
    class TestExtra(RemoteStorageManagerSuite):
        plugin_class = LocalTieredStorage

        def test_something_plugin_specific(self) -> None:
            pass

    assert "test_something_plugin_specific" in vars(TestExtra)


# Through pytest ---------------------------------------------------------------------------------
HEADER = """
import pytest

from tierlog.conformance import RemoteStorageManagerSuite
from tierlog.storage.local import LocalTieredStorage
"""

MIXIN_BEFORE_THE_SUITE = """
class MyMixin:
    def test_delete_twice_succeeds(self):
        pass


class TestMine(MyMixin, RemoteStorageManagerSuite):
    plugin_class = LocalTieredStorage
"""

SUITE_SUBCLASS_IN_BETWEEN = """
class Base(RemoteStorageManagerSuite):
    def test_delete_twice_succeeds(self):
        pass


class TestX(Base):
    plugin_class = LocalTieredStorage
"""

REPLACED_AFTER_THE_CLASS_STATEMENT = """
class TestLate(RemoteStorageManagerSuite):
    plugin_class = LocalTieredStorage


TestLate.test_delete_twice_succeeds = lambda self: None
"""

LEGITIMATE = """
class HelperMixin:
    def make_topic_name(self):
        return "helped"


class XfailMixin:
    @pytest.mark.xfail(reason="this store keeps deleted segments", strict=True)
    def test_delete_twice_succeeds(self):
        raise AssertionError("the store deviates, visibly")


class TestWithHelper(HelperMixin, RemoteStorageManagerSuite):
    plugin_class = LocalTieredStorage

    def test_the_helper_is_there(self):
        assert self.make_topic_name() == "helped"


class TestHonest(XfailMixin, RemoteStorageManagerSuite):
    plugin_class = LocalTieredStorage
"""


def _run(pytester: pytest.Pytester, body: str) -> pytest.RunResult:
    pytester.makepyfile(test_plugin=HEADER + body)
    return pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "-ra",
        "-k",
        "test_delete_twice_succeeds or test_the_helper_is_there",
    )


@pytest.mark.parametrize(
    ("body", "shadowed"),
    [
        (MIXIN_BEFORE_THE_SUITE, "TestMine.test_delete_twice_succeeds*MyMixin"),
        (SUITE_SUBCLASS_IN_BETWEEN, "Base.test_delete_twice_succeeds*Base"),
        (REPLACED_AFTER_THE_CLASS_STATEMENT, "TestLate.test_delete_twice_succeeds*TestLate"),
    ],
    ids=["mixin-before-the-suite", "suite-subclass-in-between", "replaced-after-the-class"],
)
def test_a_shadowed_standard_test_fails_the_run(
    pytester: pytest.Pytester, body: str, shadowed: str
) -> None:
    """A mixin and an intermediate class are refused at the class statement, a test replaced
    afterwards when pytest collects the class; either way the run fails before any test, and
    the message names the test and the class whose definition shadows it."""
    result = _run(pytester, body)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.assert_outcomes(errors=1)
    test, owner = shadowed.split("*")
    result.stdout.fnmatch_lines([f"*{test} {OVERRIDES}*{owner}.test_delete_twice_succeeds*"])


def test_an_xfail_override_and_a_helper_mixin_run(pytester: pytest.Pytester) -> None:
    result = _run(pytester, LEGITIMATE)
    assert result.ret == pytest.ExitCode.OK
    # TestWithHelper: the standard test and the helper's test; TestHonest: the override.
    result.assert_outcomes(passed=2, xfailed=1)
    result.stdout.fnmatch_lines(["*XFAIL*TestHonest::test_delete_twice_succeeds*keeps deleted*"])
