"""tracekit: why is my GPU idle?

The public API is small and loaded lazily (importing ``tracekit`` costs almost nothing and
never imports the terminal UI):

* :func:`analyze` - a trace, a job's folder or a folder of jobs diagnosed, as ``tracekit analyze``
  does: a result that shows itself in a notebook, with its tables as polars DataFrames
  (:mod:`tracekit.api`).
* :func:`diff` - two traces compared, as ``tracekit diff`` does.
* :func:`read_trace` - one trace file into canonical tables (:class:`TraceTables`), cached.
* :mod:`tracekit.schema` - the canonical tables and their columns.
* :mod:`tracekit.errors` - the error hierarchy.
* :func:`step` / :func:`range` - explicit marks for ``tracekit capture`` (no-ops otherwise).
"""

from __future__ import annotations

from typing import Any

from ._version import __version__

# the names below are typed by __init__.pyi beside this file: importing them here, even for
# type checkers only, would make the package's top import the front ends below it

_LAZY = {
    "analyze": ("tracekit.api", "analyze"),
    "diff": ("tracekit.api", "diff"),
    "read_trace": ("tracekit.reading.trace", "read_trace"),
    "TraceTables": ("tracekit.schema", "TraceTables"),
    "TraceInfo": ("tracekit.schema", "TraceInfo"),
    "step": ("tracekit.marks", "step"),
    "range": ("tracekit.marks", "range"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tracekit' has no attribute {name!r}")


__all__ = ["TraceInfo", "TraceTables", "__version__", "analyze", "diff", "range", "read_trace", "step"]
