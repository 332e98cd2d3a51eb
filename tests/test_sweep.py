"""The replay's sweeps (tracekit/analysis/sweep.py): the native kernel and the pure-Python
fallback give identical distances and orders on any graph, and the replay's prices do not
depend on which one ran."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from loopsim import SCENARIOS, simulate, write_kineto

import tracekit
from tracekit.analysis import sweep
from tracekit.analysis.replay import fix_edit, replay
from tracekit.analysis.steps import find_steps
from tracekit.native import PURE_PYTHON_ENV, compiled

native = pytest.mark.skipif(not sweep.native_available(), reason="native sweeps unavailable (not built, or TRACEKIT_PURE_PYTHON=1)")

_I64 = st.integers(-(1 << 40), 1 << 40)


def _col(values: list[int]) -> pl.Series:
    return pl.Series(values, dtype=pl.Int64)


@st.composite
def _dags(draw: st.DrawFn) -> tuple[int, list[int], list[int], list[list[int]]]:
    """A random DAG (edges go from a lower to a higher node of a random permutation), its
    edges in an order where each comes after the edges into its tail, and a few weight columns."""
    n = draw(st.integers(1, 40))
    perm = draw(st.permutations(range(n)))
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda p: p[0] < p[1]), max_size=150))
    pairs.sort(key=lambda p: p[1])  # by the head's position in the permutation's order
    src = [perm[a] for a, _ in pairs]
    dst = [perm[b] for _, b in pairs]
    k = draw(st.integers(1, 4))
    weights = [draw(st.lists(_I64, min_size=len(pairs), max_size=len(pairs))) for _ in range(k)]
    return n, src, dst, weights


@native
@settings(max_examples=150, deadline=None)
@given(_dags())
def test_native_longest_paths_equal_python(dag: tuple[int, list[int], list[int], list[list[int]]]) -> None:
    n, src, dst, weights = dag
    got = sweep.longest(n, _col(src), _col(dst), [_col(w) for w in weights])
    assert [g.to_list() for g in got] == [sweep.longest_python(n, src, dst, w) for w in weights]


@native
@settings(max_examples=150, deadline=None)
@given(st.integers(1, 30).flatmap(lambda n: st.tuples(st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=80))))
def test_native_kahn_equals_python(graph: tuple[int, list[tuple[int, int]]]) -> None:
    # any graph, cycles and self-loops included: the same positions, or None on both sides
    n, pairs = graph
    src, dst = [u for u, _ in pairs], [v for _, v in pairs]
    got = sweep.topological(n, _col(src), _col(dst))
    assert (None if got is None else got.to_list()) == sweep.kahn_python(n, src, dst)


@native
def test_native_kernel_refuses_bad_input() -> None:
    _sweep = compiled("sweep")
    assert _sweep is not None

    src, dst = _col([0, 5]), _col([1, 1])  # node 5 of 2
    with pytest.raises(ValueError, match="outside"):
        sweep.longest(2, src, dst, [_col([1, 1])])
    with pytest.raises(ValueError, match="outside"):
        sweep.topological(2, src, dst)
    two, one = sweep._buffer(_sweep, _col([0, 0])), sweep._buffer(_sweep, _col([1]))
    with pytest.raises(ValueError, match="multiple"):
        _sweep.longest(2, two, sweep._buffer(_sweep, _col([1, 1])), sweep._buffer(_sweep, _col([1, 2, 3])), bytearray(16))
    with pytest.raises(ValueError, match="whole number"):
        _sweep.longest(2, b"\0" * 7, b"\0" * 7, b"", bytearray(16))
    with pytest.raises(BufferError):
        _sweep.longest(2, one, one, one, b"\0" * 16)  # read-only output


@native
def test_native_column_reader() -> None:
    _sweep = compiled("sweep")
    assert _sweep is not None

    # a column of several chunks is read whole and in order
    chunked = pl.concat([_col([1, 2]), _col([]), _col([3, -(1 << 63)])], rechunk=False)
    assert list(sweep._buffer(_sweep, chunked)) == [1, 2, 3, -(1 << 63)]
    assert list(sweep._buffer(_sweep, _col([5, 6, 7]).slice(1, 2))) == [6, 7]
    out = sweep._buffer(_sweep, _col([0, 0]))
    with pytest.raises(ValueError, match="nulls"):
        _sweep.read_int64(pl.Series([1, None], dtype=pl.Int64).__arrow_c_stream__(), out)
    with pytest.raises(ValueError, match="not of int64"):
        _sweep.read_int64(pl.Series([1.0, 2.0]).__arrow_c_stream__(), out)
    with pytest.raises(ValueError, match="more values than the output holds"):
        _sweep.read_int64(_col([1, 2, 3]).__arrow_c_stream__(), out)
    with pytest.raises(ValueError, match="1 values for an output of 2"):
        _sweep.read_int64(_col([1]).__arrow_c_stream__(), out)
    capsule = _col([1, 2]).__arrow_c_stream__()
    _sweep.read_int64(capsule, out)
    with pytest.raises(ValueError, match="released"):
        _sweep.read_int64(capsule, out)  # a stream is read once
    with pytest.raises(ValueError, match="PyCapsule"):
        _sweep.read_int64(object(), out)


def test_overflow_falls_back_to_python_integers() -> None:
    # a distance beyond int64 is not wrapped around: the Python sweep takes over, and its
    # result cannot be an int64 column either
    with pytest.raises((OverflowError, TypeError)):
        sweep.longest(3, _col([0, 1]), _col([1, 2]), [_col([1 << 62, 1 << 62])])


def test_pure_python_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PURE_PYTHON_ENV, "1")
    assert not sweep.native_available()
    assert sweep.longest(3, _col([0, 1]), _col([1, 2]), [_col([2, 3])])[0].to_list() == [0, 2, 5]


def test_replay_is_the_same_without_the_native_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # native Kahn's order and sweeps, then the pure-Python time order and sweeps
    loop, _ = SCENARIOS["sync_prevents_overlap"]
    tables = tracekit.read_trace(write_kineto(simulate(loop), tmp_path / "loop.json"))
    steps = find_steps(tables.events, tables.links).frame
    edits = [e for k in ("host_device_sync", "launch_bound", "cpu_bound", "data_loading") if (e := fix_edit(k)) is not None]
    fast = replay(tables.events, tables.links, steps, edits).steps
    monkeypatch.setenv(PURE_PYTHON_ENV, "1")
    slow = replay(tables.events, tables.links, steps, edits).steps
    assert fast.equals(slow)
    assert fast.height > 0
    assert fast["host_device_sync_ns"].sum() < fast["replayed_ns"].sum()


def test_group_graph_needs_only_the_links_of_its_events(tmp_path: Path) -> None:
    # the replay builds each group's graph from the links touching the group's events
    # (replay._near); the graph builder must give the same graph as with the whole trace's links
    from tracekit.analysis.critical_path import build_graph
    from tracekit.analysis.replay import _near, _window

    loop, _ = SCENARIOS["sync_prevents_overlap"]
    tables = tracekit.read_trace(write_kineto(simulate(loop), tmp_path / "loop.json"))
    steps = find_steps(tables.events, tables.links).frame.filter(pl.col("complete")).sort("start_ns")
    group = steps.slice(2, 3)
    window = _window(int(group["rank"][0]), group)
    near = (pl.col("rank") == group["rank"][0]) & (pl.col("end_ns") >= window["start_ns"][0]) & (pl.col("start_ns") <= window["end_ns"][0])
    events, links = _near(tables.events, tables.links, near)
    assert 0 < links.height < tables.links.height
    whole = build_graph(tables.events.filter(near), tables.links, window)
    cut = build_graph(events, links, window)

    def rows(frame: pl.DataFrame) -> pl.DataFrame:
        return frame.sort(frame.columns, nulls_last=True)

    assert rows(whole.nodes).equals(rows(cut.nodes))
    assert rows(whole.edges).equals(rows(cut.edges))
    assert cut.edges.height > 0
