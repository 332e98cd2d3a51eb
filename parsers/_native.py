"""tracekit's optional compiled modules: whether they may be used, and the Arrow arrays they
hand to polars without a copy.

Every native module (the Kineto scanner and flow binding here, the cache's column map, the
analysis' kernels) is built only where the install had a compiler, and every caller keeps a
pure-Python path with identical results.  ``TRACEKIT_PURE_PYTHON=1`` asks for those paths
everywhere; this module is the one place that reads it.
"""

from __future__ import annotations

import os
from typing import TypeVar

#: set to 1 to use the pure-Python paths even where the native modules are built
PURE_PYTHON_ENV = "TRACEKIT_PURE_PYTHON"

M = TypeVar("M")


def pure_python_requested() -> bool:
    """True when ``TRACEKIT_PURE_PYTHON`` asks for the pure-Python paths (any value but 0)."""
    return os.environ.get(PURE_PYTHON_ENV, "").strip() not in ("", "0")


def usable(module: M | None) -> M | None:
    """``module`` (a native module, None where it was not built), or None where the
    pure-Python paths are asked for."""
    return None if module is None or pure_python_requested() else module


class ArrowCapsules:
    """One exported Arrow array, as its schema and array PyCapsules (what a native module
    returns), wrapped in the object the Arrow PyCapsule protocol asks for: ``pl.Series(...)``
    and ``pl.DataFrame(...)`` then import it in place.  The capsules can be imported once."""

    __slots__ = ("_pair",)

    def __init__(self, pair: tuple[object, object]) -> None:
        self._pair = pair

    def __arrow_c_array__(self, requested_schema: object | None = None) -> tuple[object, object]:
        return self._pair
