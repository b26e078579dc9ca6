"""What every fuzz target's ``main`` does: instrument tierlog's code, then hand over to atheris.

The targets import tierlog normally, so the test suite can run their ``TestOneInput`` without
atheris; ``atheris.instrument_imports()`` is therefore too late here. ``atheris.instrument_all()``
would work but instruments every function loaded (about 4,600, the standard library's included),
which takes some 20 seconds per start. Coverage of tierlog and of the target itself is what
guides the search, so only their functions are instrumented (nested code, comprehensions and
closures included: atheris patches code objects recursively), and the tierlog modules imported
later (the CLI imports its readers lazily) are instrumented as they are imported.
"""

from __future__ import annotations

import gc
import sys
import types
from collections.abc import Callable, Sequence

import atheris

_INSTRUMENTED_PACKAGES = ("tierlog", "__main__")


def _instrument() -> int:
    """Instrument the loaded functions of tierlog and of the running target; returns how many."""
    functions = [
        obj
        for obj in gc.get_objects()
        if isinstance(obj, types.FunctionType)
        and isinstance(obj.__module__, str)
        and obj.__module__.split(".")[0] in _INSTRUMENTED_PACKAGES
    ]
    for function in functions:
        atheris.instrument_func(function)
    return len(functions)


def fuzz(test_one_input: Callable[[bytes], None], argv: Sequence[str] | None = None) -> None:
    """Run libFuzzer over ``test_one_input`` with libFuzzer's flags from ``argv``; never returns."""
    count = _instrument()
    print(f"INFO: instrumented {count} functions of tierlog and the target", file=sys.stderr)
    atheris.Setup(list(sys.argv if argv is None else argv), test_one_input)
    with atheris.instrument_imports(include=["tierlog"]):
        atheris.Fuzz()
