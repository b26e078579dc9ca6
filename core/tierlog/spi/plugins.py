"""Finding plugins: a typed facade over pluggy and the ``tierlog`` entry-point group.

Nothing is imported until the registry is first asked for something, so ``import tierlog`` stays
cheap and a broken third-party plugin cannot break an unrelated command. A plugin whose import
or registration fails is reported (``failures``) and skipped; with ``TIERLOG_STRICT_PLUGINS=1``
it is an error instead. ``TIERLOG_LOAD_PLUGINS=a,b`` loads only the named entry points (besides
the core's own); an empty value loads none.

Core code asks this registry, never ``pm.hook`` directly.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata as importlib_metadata
from typing import Literal, cast

import pluggy

from tierlog.spi import hookspecs
from tierlog.spi._errors import PluginError
from tierlog.spi._rlmm import RemoteLogMetadataManager
from tierlog.spi._rsm import RemoteStorageManager

_LOG = logging.getLogger(__name__)

Kind = Literal["rsm", "rlmm"]

CORE_DISTRIBUTION = "tierlog"
BUILTIN_PLUGIN_MODULES: Mapping[str, str] = {
    "local": "tierlog.storage.local",
    "embedded": "tierlog.metadata.embedded",
}
"""The core's own plugins, declared as entry points in its pyproject like any other plugin; this
map is the fallback when tierlog runs from a source tree without being installed."""

STRICT_ENV = "TIERLOG_STRICT_PLUGINS"
LOAD_ENV = "TIERLOG_LOAD_PLUGINS"


def _new_plugin_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    return pm


def class_path(cls: type) -> str:
    """``package.module:ClassName``, the form users may type instead of a registered name."""
    return f"{cls.__module__}:{cls.__qualname__}"


@dataclass(frozen=True)
class PluginInfo:
    """A registered storage or metadata manager class and where it came from."""

    name: str
    kind: Kind
    cls: type
    plugin: str
    distribution: str | None
    version: str | None

    @property
    def class_path(self) -> str:
        return class_path(self.cls)


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that could not be loaded or whose registration was refused."""

    plugin: str
    distribution: str | None
    version: str | None
    error: str


def _abstract_problem(cls: type) -> str | None:
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(getattr(cls, "__abstractmethods__", ())))
        return f"{class_path(cls)} is abstract: it does not implement {missing}"
    return None


def _registration_problem(
    kind: Kind, base: type, table: Mapping[str, PluginInfo], name: str, cls: object
) -> str | None:
    """Why ``register(name, cls)`` must be refused, or None."""
    if not isinstance(cls, type) or not issubclass(cls, base):
        return f"registered {name!r} as {cls!r}, not a {base.__name__}"
    abstract = _abstract_problem(cls)
    if abstract is not None:
        return f"registered {name!r}: {abstract}"
    existing = table.get(name)
    if existing is not None and existing.cls is not cls:
        return (
            f"{kind} name {name!r} is already registered by plugin {existing.plugin!r} "
            f"({existing.class_path})"
        )
    return None


def _dist_name(ep: importlib_metadata.EntryPoint) -> str | None:
    return ep.dist.name if ep.dist is not None else None


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


class PluginRegistry:
    """The installed RSM and RLMM classes, by the names users type."""

    def __init__(
        self,
        *,
        group: str = hookspecs.ENTRY_POINT_GROUP,
        strict: bool | None = None,
        only: Iterable[str] | None = None,
        load_entry_points: bool = True,
    ) -> None:
        self._group = group
        self._strict = _env_flag(STRICT_ENV) if strict is None else strict
        if only is None and LOAD_ENV in os.environ:
            only = [p.strip() for p in os.environ[LOAD_ENV].split(",") if p.strip()]
        self._only = None if only is None else frozenset(only)
        self._load_entry_points = load_entry_points
        self._pm = _new_plugin_manager()
        self._lock = threading.RLock()
        self._loaded = False
        self._storage: dict[str, PluginInfo] = {}
        self._metadata: dict[str, PluginInfo] = {}
        self._failures: list[PluginFailure] = []

    # Loading ------------------------------------------------------------------------------------
    def register_plugin(
        self,
        plugin: object,
        name: str | None = None,
        *,
        distribution: str | None = None,
        version: str | None = None,
    ) -> None:
        """Register an in-process plugin object (a module or instance with hookimpls)."""
        with self._lock:
            self._ensure_loaded()
            label = name or str(getattr(plugin, "__name__", repr(plugin)))
            self._add(plugin, label, distribution, version)

    def _ensure_loaded(self) -> None:
        with self._lock:
            if self._loaded:
                return
            try:
                self._load()
            except BaseException:
                # Strict mode: every query raises until the environment is fixed, never a
                # half-loaded registry.
                self._pm = _new_plugin_manager()
                self._storage.clear()
                self._metadata.clear()
                self._failures.clear()
                raise
            self._loaded = True

    def _load(self) -> None:
        if not self._load_entry_points:
            return
        # The core's own plugins first, so their names cannot be taken by another plugin.
        # From a source tree without installation there are no core entry points: the
        # built-in modules are then registered directly, still first.
        eps = sorted(
            importlib_metadata.entry_points(group=self._group),
            key=lambda e: (_dist_name(e) != CORE_DISTRIBUTION, e.name),
        )
        if not any(_dist_name(ep) == CORE_DISTRIBUTION for ep in eps):
            for name, module in BUILTIN_PLUGIN_MODULES.items():
                self._add(importlib.import_module(module), name, CORE_DISTRIBUTION, None)
        for ep in eps:
            dist = _dist_name(ep)
            version = ep.dist.version if ep.dist is not None else None
            if dist != CORE_DISTRIBUTION and self._only is not None and (ep.name not in self._only):
                _LOG.debug("plugin %s skipped: not in %s", ep.name, LOAD_ENV)
                continue
            if self._pm.has_plugin(ep.name):
                self._fail(
                    ep.name,
                    dist,
                    version,
                    f"entry point name {ep.name!r} ({ep.value}) is already taken by "
                    "another plugin; rename the entry point",
                )
                continue
            try:
                plugin = ep.load()
            except Exception as exc:  # a broken plugin must not break the others
                self._fail(
                    ep.name,
                    dist,
                    version,
                    f"cannot import {ep.value}: {type(exc).__name__}: {exc}",
                    exc,
                )
                continue
            self._add(plugin, ep.name, dist, version)

    def _fail(
        self,
        plugin: str,
        dist: str | None,
        version: str | None,
        message: str,
        cause: BaseException | None = None,
    ) -> None:
        if self._strict:
            raise PluginError(f"plugin {plugin!r}: {message}") from cause
        _LOG.warning("plugin %r skipped: %s", plugin, message)
        self._failures.append(PluginFailure(plugin, dist, version, message))

    def _add(self, plugin: object, name: str, dist: str | None, version: str | None) -> None:
        """Register one plugin, all or nothing: if any of its registrations is refused, none of
        its classes stay registered and the plugin is reported as failed."""
        try:
            self._pm.register(plugin, name=name)
            self._pm.check_pending()
        except Exception as exc:
            if self._pm.is_registered(plugin):
                self._pm.unregister(plugin)
            self._fail(name, dist, version, f"invalid plugin: {exc}", exc)
            return

        staged: list[tuple[dict[str, PluginInfo], PluginInfo]] = []
        problems: list[str] = []

        def registrar(
            kind: Kind, base: type, table: dict[str, PluginInfo]
        ) -> Callable[[str, type], None]:
            def register(reg_name: str, cls: type) -> None:
                problem = _registration_problem(kind, base, table, reg_name, cls)
                if problem is None and any(t is table and i.name == reg_name for t, i in staged):
                    problem = f"{kind} name {reg_name!r} registered twice by this plugin"
                if problem is not None:
                    problems.append(problem)
                    return
                staged.append((table, PluginInfo(reg_name, kind, cls, name, dist, version)))

            return register

        caller = self._pm.subset_hook_caller
        others = [p for p in self._pm.get_plugins() if p is not plugin]
        try:
            caller("tierlog_register_storage_managers", others)(
                register=registrar("rsm", RemoteStorageManager, self._storage)
            )
            caller("tierlog_register_metadata_managers", others)(
                register=registrar("rlmm", RemoteLogMetadataManager, self._metadata)
            )
        except Exception as exc:
            self._pm.unregister(plugin)
            self._fail(name, dist, version, f"registration hook failed: {exc}", exc)
            return
        if problems:
            self._pm.unregister(plugin)
            self._fail(name, dist, version, "; ".join(problems))
            return
        for table, info in staged:
            table[info.name] = info

    # Queries ------------------------------------------------------------------------------------
    @property
    def storage_managers(self) -> Mapping[str, PluginInfo]:
        self._ensure_loaded()
        return dict(self._storage)

    @property
    def metadata_managers(self) -> Mapping[str, PluginInfo]:
        self._ensure_loaded()
        return dict(self._metadata)

    @property
    def failures(self) -> list[PluginFailure]:
        self._ensure_loaded()
        return list(self._failures)

    def storage_manager_class(self, name: str) -> type[RemoteStorageManager]:
        """The RSM class registered as ``name``, or named ``package.module:ClassName``."""
        cls = self._resolve(name, "rsm", RemoteStorageManager, self.storage_managers)
        return cast("type[RemoteStorageManager]", cls)

    def metadata_manager_class(self, name: str) -> type[RemoteLogMetadataManager]:
        """The RLMM class registered as ``name``, or named ``package.module:ClassName``."""
        cls = self._resolve(name, "rlmm", RemoteLogMetadataManager, self.metadata_managers)
        return cast("type[RemoteLogMetadataManager]", cls)

    def create_storage_manager(self, name: str, configs: Mapping[str, str]) -> RemoteStorageManager:
        """Construct (no arguments, as Kafka does) and configure the named RSM."""
        instance = self.storage_manager_class(name)()
        instance.configure(configs)
        return instance

    def create_metadata_manager(
        self, name: str, configs: Mapping[str, str]
    ) -> RemoteLogMetadataManager:
        """Construct and configure the named RLMM."""
        instance = self.metadata_manager_class(name)()
        instance.configure(configs)
        return instance

    @staticmethod
    def _resolve(name: str, kind: Kind, base: type, table: Mapping[str, PluginInfo]) -> type:
        info = table.get(name)
        if info is not None:
            return info.cls
        if ":" not in name:
            known = ", ".join(sorted(table)) or "none"
            raise PluginError(
                f"no {kind} plugin named {name!r} (registered: {known}); "
                "or give a class as package.module:ClassName"
            )
        module_name, _, qualname = name.partition(":")
        try:
            obj: object = importlib.import_module(module_name)
        except Exception as exc:  # any import-time failure of user code is a plugin error
            raise PluginError(
                f"cannot import module {module_name!r} for {name!r}: {type(exc).__name__}: {exc}"
            ) from exc
        for part in qualname.split("."):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                raise PluginError(f"module {module_name!r} has no {qualname!r}") from None
        if not isinstance(obj, type) or not issubclass(obj, base):
            raise PluginError(f"{name!r} is not a subclass of {base.__name__}")
        abstract = _abstract_problem(obj)
        if abstract is not None:
            raise PluginError(abstract)
        return obj


_registry: PluginRegistry | None = None
_registry_lock = threading.Lock()


def get_registry() -> PluginRegistry:
    """The process-wide registry, loaded on first use."""
    global _registry
    with _registry_lock:
        if _registry is None:
            _registry = PluginRegistry()
        return _registry


def reset_registry() -> None:
    """Forget the process-wide registry (tests change the environment and reload)."""
    global _registry
    with _registry_lock:
        _registry = None
