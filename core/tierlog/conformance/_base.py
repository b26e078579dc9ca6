"""What the conformance suites share: capabilities with reasons, configuring the plugin, the guard.

A suite finds the plugin class on the subclass (``plugin_class``) or, when run through
``tierlog conformance`` / the pytest options, from the registry by name. Its configuration is the
subclass's ``config`` attribute or else the plugin class's own ``conformance_config()``
classmethod, with the ``--tierlog-config key=value`` options on top: a command line adjusts the
configuration a plugin declares for the suite (a bucket, an endpoint) without having to repeat
the rest of it. ``conformance_config()`` runs with ``tempfile.tempdir`` pointed at the test's
``tmp_path``, so a plugin that makes a fresh temporary directory with ``tempfile.mkdtemp()`` gets
one that pytest cleans up.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import pytest

from tierlog.spi import ConfigError, PluginError
from tierlog.spi.plugins import get_registry

_Caps = TypeVar("_Caps")

RSM_OPTION = "tierlog_rsm"
RLMM_OPTION = "tierlog_rlmm"
CONFIG_OPTION = "tierlog_config"


@dataclass(frozen=True)
class Unsupported:
    """A capability the plugin does not have, and why; tests that need it skip with the reason."""

    reason: str


Capability = bool | Unsupported
"""``True`` when supported, or ``Unsupported("why")``. A bare ``False`` is refused: every skip
must carry a reason."""


def require(capability: Capability, name: str) -> None:
    """Skip the calling test unless ``capability`` is supported."""
    if capability is True:
        return
    if isinstance(capability, Unsupported):
        pytest.skip(f"{name} not supported: {capability.reason}")
    raise TypeError(f"capability {name} must be True or Unsupported('reason'), got {capability!r}")


def parse_key_values(values: Sequence[str], option: str) -> dict[str, str]:
    """``["k=v", ...]`` as a dict (the last of a repeated key wins); ``ConfigError`` naming
    ``option`` for an item without ``=`` or without a key."""
    config: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{option} expects KEY=VALUE, got {item!r}")
        config[key.strip()] = value
    return config


def parse_config_options(values: list[str] | None) -> dict[str, str] | None:
    """``["k=v", ...]`` from ``--tierlog-config`` as a dict; ``None`` when none were given."""
    if not values:
        return None
    try:
        return parse_key_values(values, "--tierlog-config")
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None


def plugin_conformance_config(plugin_class: type, tmp_path: Path) -> dict[str, str] | None:
    """What the plugin's ``conformance_config()`` classmethod returns, as strings; ``None``
    when the plugin declares none. ``tempfile.tempdir`` points at ``tmp_path`` meanwhile, so
    the temporary directories it makes go away with ``tmp_path``."""
    factory: Any = getattr(plugin_class, "conformance_config", None)
    if factory is None:
        return None
    saved = tempfile.tempdir
    tempfile.tempdir = str(tmp_path)
    try:
        return {str(k): str(v) for k, v in dict(factory()).items()}
    finally:
        tempfile.tempdir = saved


def overlay_config(
    base: Mapping[str, str], given: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """``base`` with ``given`` on top, and the keys of ``base`` that ``given`` replaced."""
    return {**base, **given}, sorted(set(base) & set(given))


def resolve_plugin_class(kind: str, name: str, *, flag_prefix: str = "--tierlog-") -> type:
    """The ``kind`` (``rsm`` or ``rlmm``) plugin class registered as ``name`` or named
    ``package.module:ClassName``.

    When ``name`` is not of that kind but is a plugin of the other one, the ``PluginError``
    says so and names the option to use (``{flag_prefix}rlmm NAME``): ``embedded`` given as an
    RSM is a slip of the option, not an unknown plugin.
    """
    registry = get_registry()
    lookups: dict[str, Callable[[str], type]] = {
        "rsm": registry.storage_manager_class,
        "rlmm": registry.metadata_manager_class,
    }
    try:
        return lookups[kind](name)
    except PluginError:
        other = "rlmm" if kind == "rsm" else "rsm"
        if not _names_a_plugin(lookups[other], name):
            raise
    raise PluginError(f"{name} is an {other.upper()} plugin: use {flag_prefix}{other} {name}")


def _names_a_plugin(lookup: Callable[[str], type], name: str) -> bool:
    """Whether ``lookup`` finds ``name``; its error, if any, is not the one to show."""
    try:
        lookup(name)
    except PluginError:
        return False
    return True


_SUITE_PACKAGE = "tierlog.conformance."


def _declares_expected_outcome(test: object) -> bool:
    """Whether ``test`` carries an ``xfail`` or ``skip``/``skipif`` mark with a reason."""
    for mark in getattr(test, "pytestmark", []):
        if mark.name in {"xfail", "skip", "skipif"} and (
            mark.kwargs.get("reason") or (mark.name == "skip" and mark.args)
        ):
            return True
    return False


def _is_standard_suite(cls: type) -> bool:
    """Whether ``cls`` is one of the shipped suites (it defines the standard tests)."""
    return issubclass(cls, SuiteBase) and cls.__module__.startswith(_SUITE_PACKAGE)


def shadowed_standard_tests(cls: type) -> list[str]:
    """Why each standard test of ``cls`` that does not run as the suite wrote it is refused.

    The rule looks at what pytest will call: the attribute ``getattr`` resolves on ``cls``
    through its MRO, not only what ``cls`` itself defines, so a mixin placed before the suite
    in the bases, an intermediate subclass, or an assignment after the class statement cannot
    swap a standard test for one that passes. A standard test is a ``test_*`` attribute of a
    shipped suite class; the suite's own function (the nearest shipped definition in the MRO)
    is what must resolve, unless the replacement is marked ``xfail``/``skip`` with a reason,
    which the test report then shows. Empty when every standard test is intact.
    """
    if _is_standard_suite(cls):
        return []  # the suites themselves define the standard tests
    problems: list[str] = []
    checked: set[str] = set()
    for suite in cls.__mro__:
        if not _is_standard_suite(suite):
            continue
        for name, standard in vars(suite).items():
            if not name.startswith("test_") or name in checked:
                continue
            checked.add(name)
            resolved = getattr(cls, name, None)
            if resolved is standard or _declares_expected_outcome(resolved):
                continue
            owner = next((c for c in cls.__mro__ if name in vars(c)), cls)
            problems.append(
                f"{cls.__qualname__}.{name} overrides a standard conformance test of "
                f"{suite.__name__}: {owner.__qualname__}.{name} (module {owner.__module__}) "
                "shadows the suite's; remove it, or mark the override "
                "@pytest.mark.xfail(reason=...) or @pytest.mark.skip(reason=...) to say why "
                "the plugin deviates"
            )
    return problems


class SuiteBase:
    """Base of the shipped conformance suites (RSM, RLMM, object-store backend).

    A plugin's subclass may not silently override or delete a standard test: the test that
    resolves on the subclass (through mixins and intermediate classes too) must be the suite's,
    or an override marked ``@pytest.mark.xfail(reason=...)`` or ``@pytest.mark.skip(reason=...)``,
    so every deviation from the contract is visible, with its reason, in the test report (the
    langchain-tests guard). Breaking that rule fails loudly: at the class statement
    (``TypeError``), and again when pytest collects the class (``shadowed_standard_tests``,
    run by the ``pytest11`` plugin), which also catches a test replaced after the class
    statement.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        problems = shadowed_standard_tests(cls)
        if problems:
            raise TypeError("\n".join(problems))

    plugin_class: ClassVar[type | None] = None
    """The class under test; leave ``None`` to take it from ``--tierlog-rsm``/``--tierlog-rlmm``."""

    config: ClassVar[Mapping[str, str] | None] = None
    """A fixed configuration; leave ``None`` to use the plugin's ``conformance_config()``."""

    _option_name: ClassVar[str] = ""
    _kind: ClassVar[str] = ""

    @classmethod
    def _resolve_plugin_class(cls, pytest_config: pytest.Config) -> type:
        name = pytest_config.getoption(cls._option_name, default=None)
        if cls.plugin_class is not None:
            return cls.plugin_class
        if not name:
            pytest.skip(
                f"no {cls._kind} under test: set plugin_class on {cls.__name__} or pass "
                f"--{cls._option_name.replace('_', '-')} NAME"
            )
        return resolve_plugin_class(cls._kind, name)

    @classmethod
    def _plugin_class_of(cls, pytest_config: pytest.Config, base: type) -> type:
        """The class under test, checked to implement ``base``."""
        plugin = cls._resolve_plugin_class(pytest_config)
        if not (isinstance(plugin, type) and issubclass(plugin, base)):
            pytest.fail(f"{plugin!r} is not a {base.__name__} subclass", pytrace=False)
        return plugin

    @staticmethod
    def _declared_capabilities(
        declared_on_suite: _Caps | None, plugin_class: type, kind: type[_Caps]
    ) -> _Caps:
        """The suite subclass's capabilities, else the plugin's ``conformance_capabilities()``,
        else everything supported."""
        if declared_on_suite is not None:
            return declared_on_suite
        factory: Any = getattr(plugin_class, "conformance_capabilities", None)
        if factory is None:
            return kind()
        declared = factory()
        if not isinstance(declared, kind):
            pytest.fail(
                f"{plugin_class.__qualname__}.conformance_capabilities() must return "
                f"{kind.__name__}, got {declared!r}",
                pytrace=False,
            )
        return declared

    @classmethod
    def _make_config(
        cls, pytest_config: pytest.Config, plugin_class: type, tmp_path: Path
    ) -> dict[str, str]:
        given = parse_config_options(pytest_config.getoption(CONFIG_OPTION, default=None))
        base = (
            dict(cls.config)
            if cls.config is not None
            else plugin_conformance_config(plugin_class, tmp_path)
        )
        if base is None and given is None:
            pytest.fail(
                f"{plugin_class.__qualname__} has no conformance_config() classmethod and no "
                "configuration was given: pass --tierlog-config key=value or set `config` on "
                f"{cls.__name__}",
                pytrace=False,
            )
        return overlay_config(base or {}, given or {})[0]
