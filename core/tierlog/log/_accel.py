"""The optional C accelerator, ``tierlog.log._speedups``, imported once for its users.

``record`` takes ``decode_block`` from it and ``batch`` takes ``walk_batch_headers``; each keeps a
pure-Python twin that is the reference and the fallback. ``TIERLOG_NO_SPEEDUPS=1`` rules the
accelerator out (to chase a bug, or to test the pure paths); a missing build leaves it out too.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Final


def _load() -> ModuleType | None:
    if os.environ.get("TIERLOG_NO_SPEEDUPS", "") not in ("", "0"):
        return None
    try:
        return importlib.import_module("tierlog.log._speedups")
    except ImportError:
        return None


SPEEDUPS_MODULE: Final[ModuleType | None] = _load()
"""``tierlog.log._speedups``, or None when it is not built or ruled out."""
