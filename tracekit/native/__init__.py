"""tracekit's optional compiled modules, in one place: the C sources beside this file, the one
loader every caller goes through, and the small helpers the modules need from Python.

The modules (each ``_<name>.c`` here, with its type stub ``_<name>.pyi``):

* ``kineto_scan``: the Kineto reader's chunk scanner, JSON events straight into Arrow columns;
* ``dag``: the critical path's longest paths of every step graph;
* ``sweep``: the replay's longest-path sweeps and Kahn's order.

Each is built only where the install found a C compiler (``setup.py``), and every caller keeps
one pure-Python implementation of the same concept with identical results, which is also the
reference the equivalence tests compare the module with.  :func:`load` answers None where a
module was not built or where ``TRACEKIT_PURE_PYTHON`` asks for the pure-Python path: ``1``
for every module, or a comma-separated list of names (``TRACEKIT_PURE_PYTHON=dag,sweep``) for
some, which is how a benchmark measures what one module buys.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import os
import sys
from collections.abc import Callable
from types import ModuleType

#: ``1``: the pure-Python paths everywhere; a comma-separated list of module names: for those
PURE_PYTHON_ENV = "TRACEKIT_PURE_PYTHON"
#: every native module, by the name :func:`load` takes (the extension is ``_<name>``)
MODULES = ("kineto_scan", "dag", "sweep")


def _requested() -> frozenset[str]:
    raw = os.environ.get(PURE_PYTHON_ENV, "").strip()
    if raw in ("", "0"):
        return frozenset()
    names = {part.strip() for part in raw.split(",") if part.strip()}
    if names & set(MODULES):
        return frozenset(names & set(MODULES))
    return frozenset(MODULES)  # any other value (1, yes, true): every module


def pure_python_requested(name: str | None = None) -> bool:
    """True when ``TRACEKIT_PURE_PYTHON`` asks for the pure-Python path of module ``name``
    (of every module, when ``name`` is None)."""
    asked = _requested()
    return asked == frozenset(MODULES) if name is None else name in asked


def load(name: str) -> ModuleType | None:
    """The native module ``name`` (one of :data:`MODULES`), or None where it was not built or
    where ``TRACEKIT_PURE_PYTHON`` asks for its pure-Python path."""
    if name not in MODULES:
        raise ValueError(f"no native module {name!r} (there are: {', '.join(MODULES)})")
    if pure_python_requested(name):
        return None
    return _import(name)


def compiled(name: str) -> ModuleType | None:
    """The module ``name`` where the install built it, whatever ``TRACEKIT_PURE_PYTHON`` says
    (for the equivalence tests, which call it and its pure-Python reference side by side)."""
    if name not in MODULES:
        raise ValueError(f"no native module {name!r} (there are: {', '.join(MODULES)})")
    return _import(name)


@functools.cache
def _import(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"{__name__}._{name}")
    except ImportError:
        return None


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

    Freeing a large block that malloc had mapped raises glibc's mmap threshold to its size, so
    large blocks allocated after it come from the heap and stay resident once freed (in a
    parse: the blocks read from the file, the chunks' buffers, the scanner's smaller columns).
    A parse calls this where what is free will not be reused before its peak.  Only whole
    free pages go back, to be faulted in again if the heap grows into them."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


__all__ = ["MODULES", "PURE_PYTHON_ENV", "ArrowCapsules", "compiled", "load", "pure_python_requested", "release_free_heap"]
