"""Hatchling build hook: compile the optional C accelerator ``tierlog.log._speedups``.

``core/tierlog/log/_speedups.c`` (with ``_speedups_encode.h``, which it includes) decodes and
encodes records blocks and extracts the cleaner's key digests many times faster than the
pure-Python code of ``tierlog.log.record`` and ``tierlog.compaction.key_digests``, which stays
the reference and the fallback. This hook builds
the extension for both kinds of wheel:

- a regular wheel (``pip wheel``, ``pip install .``, ``python -m build``): the extension is
  compiled in a temporary directory and added to the wheel as ``tierlog/log/_speedups.<suffix>``,
  and the wheel is tagged for this interpreter and platform instead of ``py3-none-any``;
- an editable wheel (``pip install -e``): the extension is compiled in the source tree, next to
  ``record.py``, where the editable install's path entry finds it (the file is git-ignored, and
  so left out of the sdist and of regular wheels). Re-running ``pip install -e`` rebuilds it,
  which is also what to do after editing the C source.

Compilation goes through setuptools' ``build_ext``, which knows each platform's compiler and
the interpreter's flags (``sysconfig``). If it fails (typically: no C compiler; or not CPython,
whose C API the extension relies on), the build still succeeds with a pure-Python wheel and a
warning, because tierlog works without the accelerator; with ``TIERLOG_REQUIRE_SPEEDUPS=1`` in
the environment the build fails instead, which is how CI proves the extension builds. Nothing is
done for the sdist, which ships the C source.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

MODULE = "tierlog.log._speedups"
SOURCE = Path("core", "tierlog", "log", "_speedups.c")
REQUIRE_ENV = "TIERLOG_REQUIRE_SPEEDUPS"


def _flags() -> list[str]:
    """Optimise, and warn on anything suspicious (the source compiles clean with -Wall)."""
    if os.name == "nt":
        return ["/O2", "/W3"]
    return ["-O2", "-Wall"]


class SpeedupsBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    """Compile ``_speedups.c`` before the wheel target builds; see the module docstring."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        """Build the extension into the wheel (``standard``) or the source tree (``editable``)."""
        self._temp_dirs: list[str] = []
        if self.target_name != "wheel":
            return
        suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
        if version == "editable":
            # A stale build of older sources must not outlive a failed compilation.
            in_tree = Path(self.root, SOURCE).with_name("_speedups" + suffix)
            in_tree.unlink(missing_ok=True)
            self._compile(Path(self.root, "core"))
            return
        build_lib = tempfile.mkdtemp(prefix="tierlog-speedups-")
        self._temp_dirs.append(build_lib)
        built = self._compile(Path(build_lib))
        if built is not None:
            build_data["force_include"][str(built)] = f"tierlog/log/{built.name}"
            build_data["pure_python"] = False
            build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        """Remove the temporary build directories."""
        for path in getattr(self, "_temp_dirs", []):
            shutil.rmtree(path, ignore_errors=True)

    def _compile(self, build_lib: Path) -> Path | None:
        """Compile into ``build_lib/tierlog/log/``: the file built, or ``None`` if that failed."""
        build_temp = tempfile.mkdtemp(prefix="tierlog-speedups-obj-")
        self._temp_dirs.append(build_temp)
        try:
            if sys.implementation.name != "cpython":
                # It fills tuples in place (CPython's API); elsewhere the pure decoder is better.
                raise RuntimeError(f"{sys.implementation.name} is not CPython")
            from setuptools import Distribution, Extension
            from setuptools.command.build_ext import build_ext

            ext = Extension(
                MODULE, sources=[str(Path(self.root, SOURCE))], extra_compile_args=_flags()
            )
            cmd = build_ext(Distribution({"name": "tierlog", "ext_modules": [ext]}))
            cmd.build_lib = str(build_lib)
            cmd.build_temp = build_temp
            cmd.force = True
            cmd.ensure_finalized()
            cmd.run()
            built = Path(cmd.get_ext_fullpath(MODULE))
        except Exception as e:
            message = f"could not build the C accelerator {MODULE} ({type(e).__name__}: {e})"
            if os.environ.get(REQUIRE_ENV, "") not in ("", "0"):
                raise RuntimeError(f"{message} and {REQUIRE_ENV} is set") from e
            self.app.display_warning(
                f"WARNING: {message}; tierlog will use its pure-Python record decoder"
            )
            return None
        self.app.display_info(f"built the C accelerator {MODULE}: {built}")
        return built
