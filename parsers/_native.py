"""tracekit's optional compiled modules: whether they may be used, and the Arrow arrays they
hand to polars without a copy; and giving the C heap's free pages back to the system.

Every native module (the Kineto scanner and flow binding here, the cache's column map, the
analysis' kernels) is built only where the install had a compiler, and every caller keeps a
pure-Python path with identical results.  ``TRACEKIT_PURE_PYTHON=1`` asks for those paths
everywhere; this module is the one place that reads it.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from collections.abc import Callable
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


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    return function


def release_free_heap() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``; nothing
    elsewhere).

    Freeing a large mapped block raises glibc's mmap threshold to its size (up to 32 MB), so
    the large blocks allocated after it come from the heap and stay there, resident, once
    freed: once the gzip file read whole has been freed, the flow binding's tables and the
    sort's buffers.  A parse calls this after its scans and again just before the canonical
    gather, where what is free will not be reused before the parse's peak (2 MB of rank0's
    and control's peak RSS, docs/performance.md, round 14).  What the heap holds is
    untouched; only whole free pages go back, to be faulted in again if the heap grows into
    them."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
