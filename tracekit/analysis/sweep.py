"""Longest-path sweeps and Kahn's order over a graph given as edge columns.

The replay (:mod:`.replay`) replays a group of steps by relaxing every edge of its graph once,
in the topological order of the edges' heads, for the unchanged graph and for each fix: one
sweep per scenario.  These are the only per-edge loops of the replay, so they run in native
code (``tracekit.analysis._sweep``, a small C extension built when the install has a
compiler) over the columns' Arrow buffers; the pure-Python loops below are the fallback and
give identical results (``TRACEKIT_PURE_PYTHON=1`` forces them, and they take over when a
distance would leave int64, where Python's integers do not overflow).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import polars as pl

#: set to 1 to use the pure-Python sweeps even where the native module is built
PURE_PYTHON_ENV = "TRACEKIT_PURE_PYTHON"


def _native() -> ModuleType | None:
    """The compiled module, or None (not built, or the pure-Python path is asked for)."""
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        return None
    try:
        from . import _sweep  # type: ignore[attr-defined]
    except ImportError:
        return None
    module: ModuleType = _sweep
    return module


def native_available() -> bool:
    """Whether the sweeps can run in native code in this process."""
    return _native() is not None


#: below this many edge relaxations the Python loop costs less than importing pyarrow (about
#: 70 ms of CPU), through whose buffers the native code reads polars' columns
NATIVE_MIN_WORK = 300_000


def _native_for(work: int, min_work: int | None = None) -> ModuleType | None:
    """The compiled module where it pays for ``work`` edge visits (at least ``min_work``,
    default :data:`NATIVE_MIN_WORK`, unless pyarrow is loaded already), else None; the
    results are the same either way."""
    native = _native()
    least = NATIVE_MIN_WORK if min_work is None else min_work
    if native is None or (work < least and "pyarrow" not in sys.modules):
        return None
    return native


def native_pays(edges: int) -> bool:
    """Whether a graph of this many edges is ordered and swept natively."""
    return _native_for(edges) is not None


def _buffer(values: pl.Series) -> Any:
    """A read-only int64 buffer over a column without nulls (Arrow's, no copy when the
    column is one chunk)."""
    arr = values.cast(pl.Int64).rechunk().to_arrow()
    if arr.null_count:
        raise ValueError("a sweep column holds nulls")
    data = arr.buffers()[1]
    view = memoryview(data) if data is not None else memoryview(b"")
    return view[8 * arr.offset : 8 * (arr.offset + len(arr))]


def _column(buf: bytearray, count: int) -> pl.Series:
    import pyarrow as pa

    return pl.Series(pl.from_arrow(pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(buf)])))


def longest(n: int, src: pl.Series, dst: pl.Series, weights: Sequence[pl.Series], *, min_work: int | None = None) -> list[pl.Series]:
    """Every node's longest distance from a source, once per weight column: all nodes start at
    0 and the edges ``src[i] → dst[i]`` (node indices below ``n``, in an order where every
    edge comes after the edges into its tail) raise their head to ``tail + weight``.

    ``weights`` are int64 columns without nulls, one per scenario, aligned with the edges;
    ``min_work``: see :func:`_native_for`."""
    m = src.len()
    native = _native_for(m * len(weights), min_work)
    if native is not None and weights:
        stacked = pl.concat([w.cast(pl.Int64) for w in weights]) if m else pl.Series([], dtype=pl.Int64)
        out = bytearray(8 * n * len(weights))
        if native.longest(n, _buffer(src), _buffer(dst), _buffer(stacked), out):
            whole = _column(out, n * len(weights))
            return [whole.slice(j * n, n) for j in range(len(weights))]
    s, d = src.to_list(), dst.to_list()
    return [pl.Series(longest_python(n, s, d, w.to_list()), dtype=pl.Int64) for w in weights]


def longest_python(n: int, src: Sequence[int], dst: Sequence[int], weights: Sequence[int]) -> list[int]:
    """:func:`longest` for one scenario, in Python."""
    dist = [0] * n
    for u, v, w in zip(src, dst, weights, strict=True):
        t = dist[u] + w
        if t > dist[v]:
            dist[v] = t
    return dist


def topological(n: int, src: pl.Series, dst: pl.Series, *, min_work: int | None = None) -> pl.Series | None:
    """Every node's position in Kahn's topological order of the edges ``src → dst`` (the
    ready nodes kept as a stack: see :func:`kahn_python`), or None when the graph has a cycle."""
    native = _native_for(src.len(), min_work)
    if native is not None:
        out = bytearray(8 * n)
        if native.topological(n, _buffer(src), _buffer(dst), out):
            return _column(out, n)
        return None
    pos = kahn_python(n, src.to_list(), dst.to_list())
    return None if pos is None else pl.Series(pos, dtype=pl.Int64)


def kahn_python(n: int, s: Sequence[int], d: Sequence[int]) -> list[int] | None:
    """Every node's position in a topological order, or None when the graph has a cycle: the
    nodes without predecessors, in ascending order, form a stack; the last is taken and each
    successor (in edge order) that becomes ready is pushed."""
    indeg = [0] * n
    succ: list[list[int]] = [[] for _ in range(n)]
    for u, v in zip(s, d, strict=True):
        indeg[v] += 1
        succ[u].append(v)
    ready = [i for i in range(n) if indeg[i] == 0]
    pos = [0] * n
    k = 0
    while ready:
        u = ready.pop()
        pos[u] = k
        k += 1
        for v in succ[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                ready.append(v)
    return pos if k == n else None
