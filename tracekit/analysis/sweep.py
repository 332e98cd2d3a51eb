"""Longest-path sweeps and Kahn's order over a graph given as edge columns.

The replay (:mod:`.replay`) replays a group of steps by relaxing every edge of its graph once,
in the topological order of the edges' heads, for the unchanged graph and for each fix: one
sweep per scenario.  These are the only per-edge loops of the replay, so they run in native
code (``tracekit.native._sweep``, a small C extension built when the install has a
compiler), which reads the columns through the Arrow C stream interface; the pure-Python
loops below are the fallback and give identical results (``TRACEKIT_PURE_PYTHON=1`` forces
them, and they take over when a distance would leave int64, where Python's integers do not
overflow).
"""

from __future__ import annotations

import array
from collections.abc import Sequence
from types import ModuleType

import polars as pl

from ..native import load


def _native() -> ModuleType | None:
    """The compiled module, or None (not built, or the pure-Python path is asked for)."""
    return load("sweep")


def native_available() -> bool:
    """Whether the sweeps can run in native code in this process."""
    return _native() is not None


def _buffer(native: ModuleType, values: pl.Series) -> array.array[int]:
    """A column without nulls as an int64 array (read by the native module through the Arrow
    C stream interface: neither numpy nor pyarrow is needed)."""
    column = values.cast(pl.Int64)
    out = array.array("q", bytes(8 * column.len()))
    native.read_int64(column.__arrow_c_stream__(), out)
    return out


def longest(n: int, src: pl.Series, dst: pl.Series, weights: Sequence[pl.Series]) -> list[pl.Series]:
    """Every node's longest distance from a source, once per weight column: all nodes start at
    0 and the edges ``src[i] → dst[i]`` (node indices below ``n``, in an order where every
    edge comes after the edges into its tail) raise their head to ``tail + weight``.

    ``weights`` are int64 columns without nulls, one per scenario, aligned with the edges."""
    native = _native()
    if native is not None and weights:
        stacked = pl.concat([w.cast(pl.Int64) for w in weights])
        out = array.array("q", bytes(8 * n * len(weights)))
        if native.longest(n, _buffer(native, src), _buffer(native, dst), _buffer(native, stacked), out):
            whole = pl.Series(out, dtype=pl.Int64)
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


def topological(n: int, src: pl.Series, dst: pl.Series) -> pl.Series | None:
    """Every node's position in Kahn's topological order of the edges ``src → dst`` (the
    ready nodes kept as a stack: see :func:`kahn_python`), or None when the graph has a cycle."""
    native = _native()
    if native is not None:
        out = array.array("q", bytes(8 * n))
        if native.topological(n, _buffer(native, src), _buffer(native, dst), out):
            return pl.Series(out, dtype=pl.Int64)
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
