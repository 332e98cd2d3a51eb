"""The analysis' optional compiled kernels, loaded in one place.

``tracekit.analysis._dag`` (the critical path's longest paths) and ``tracekit.analysis._sweep``
(the replay's sweeps and Kahn's order) are small C extensions built when the install has a
compiler.  Each caller keeps a pure-Python path with identical results; :func:`load` answers
None where a module was not built or where ``TRACEKIT_PURE_PYTHON=1`` asks for that path.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from tracekit.parsers._native import PURE_PYTHON_ENV, pure_python_requested

__all__ = ["PURE_PYTHON_ENV", "load", "pure_python_requested"]


def load(name: str) -> ModuleType | None:
    """``tracekit.analysis.<name>``, or None (not built, or the pure-Python path is asked for)."""
    if pure_python_requested():
        return None
    try:
        return importlib.import_module(f"{__package__}.{name}")
    except ImportError:
        return None
