"""The analysis' optional compiled kernels, loaded in one place.

``tracekit.analysis._dag`` (the critical path's longest paths) and ``tracekit.analysis._sweep``
(the replay's sweeps and Kahn's order) are small C extensions built when the install has a
compiler.  Each caller keeps a pure-Python path with identical results; :func:`load` answers
None where a module was not built or where ``TRACEKIT_PURE_PYTHON=1`` asks for that path.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

#: set to 1 to use the pure-Python paths even where the native modules are built
PURE_PYTHON_ENV = "TRACEKIT_PURE_PYTHON"


def pure_python_requested() -> bool:
    return os.environ.get(PURE_PYTHON_ENV, "").strip() not in ("", "0")


def load(name: str) -> ModuleType | None:
    """``tracekit.analysis.<name>``, or None (not built, or the pure-Python path is asked for)."""
    if pure_python_requested():
        return None
    try:
        return importlib.import_module(f"{__package__}.{name}")
    except ImportError:
        return None
