"""The critical path of every step: which time actually decides how long the step takes.

A breakdown says where time went; the critical path says which of it matters.  For each step
window (and for the whole trace when it has no steps) tracekit builds a dependency graph of
the rank's host threads and GPU streams and takes its longest path (networkx); every
nanosecond of the path is attributed to an event and a cause, and what-if questions
(:mod:`tracekit.analysis.whatif`) re-weight the graph and recompute the path.

**Nodes** are instants: on a host thread, every start or end of a recorded event (a thread's
timeline is cut at every boundary, so nested events share nodes); on a GPU stream, the start
and end of every kernel, copy and memset; plus one source ``S`` (the step start) and one sink
``T`` per step.

**Edges** (:class:`EdgeKind`) carry integer ns:

* ``cpu`` / ``data_loading``: consecutive instants of a host thread; the stretch belongs to the
  innermost event open there (its self time), or to untraced time of the thread that drives
  the step.  Stretches on other threads that no event covers are waits (weight 0).
* ``launch``: runtime/driver call start → the GPU activity it launched (CUDA-graph launches
  fan out to every kernel they replay).
* ``gpu``: an activity's start → end.
* ``stream``: previous activity end → next start on the same stream.
* ``sync``: GPU activity end → end of the host call that waited for it (device/stream/event
  synchronisation, blocking copies, ``.item()``); from explicit sync rows where the trace has
  them, otherwise inferred from blocking API calls and their timing (``inferred = True``).
* ``cross_stream``: the activity an event was recorded after → the first activity a
  ``cudaStreamWaitEvent`` held back on another stream.
* ``wake``: the driving thread → another thread's activity after that thread idled (inferred).
* ``window``: ``S``/``T`` to the step's first and last instants, and GPU work launched before
  the step that starts inside it.

**Weights.**  Every edge's weight is at most the time between its ends in the trace, so the
recorded schedule satisfies every edge and the longest path is never longer than the step.
For each instant, the edge that explains *why it happened then* is tight (weight = the time
between its ends): a kernel that waited for its launch gets the full launch delay, a kernel
queued behind another gets the gap on its stream and only the typical launch latency on its
launch edge; a sync call that waited gets the GPU → host edge, and only the time after the
GPU finished as its own duration.  The tight edges therefore chain from ``S`` to ``T`` and
the path's length equals the step's wall time whenever the driving thread is recorded.

Everything up to the path itself is built with polars joins over all steps at once; the
only Python loops are over ranks and over steps (networkx's path, one graph per step).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import networkx as nx
import polars as pl

from ..native import load as load_native
from ..schema import GPU_ACTIVITY_KINDS, LAUNCH_KINDS, EventKind
from . import patterns
from .causes import CP_CAUSES
from .classify import is_blocking_call, is_host_wait_row
from .intervals import union
from .timeline import LAUNCH_GAP_NS, LAUNCH_LATENCY_NS
from .whatif import TAG_CAUSE, TAGS, WhatIf, WhatIfResult, scenario_weights

#: a helper thread's untraced stretch shorter than this is work (dispatch overhead between its
#: operators); a longer one is a wait for work (the same bound the timeline analysis uses
#: between launch overhead and other host work)
HELPER_IDLE_NS = LAUNCH_GAP_NS
#: a launch call this long, made while this many earlier activities of its device still waited
#: to start, was blocked on a full launch queue: it waited for the GPU to retire work
QUEUE_WAIT_NS = 100_000
QUEUE_DEPTH = 32
#: windows are built in groups of about this many events, so the graph's working memory is
#: bounded by the group, not the trace (a trace below it is one group); 125,000 rather than
#: 500,000 lowers the peak RSS by 0.2 GB at 0.3 and 1.1 GB for the same CPU time (measured)
BATCH_EVENTS = 125_000

_HOST = [EventKind.ANNOTATION.value, EventKind.CPU_OP.value, *LAUNCH_KINDS]
_THREAD = ["pid", "tid"]
_WIN = ["rank", "step"]
_CHAIN = ["rank", "step", "pid", "tid"]
_STREAM = ["rank", "step", "device", "stream"]


class EdgeKind(str, Enum):
    """What an edge of the step graph stands for."""

    CPU = "cpu"  #: a stretch of a host thread (nesting: the innermost open event's self time)
    DATA_LOADING = "data_loading"  #: a stretch of a host thread inside a data-loading range
    LAUNCH = "launch"  #: runtime/driver call → the GPU activity it launched
    GPU = "gpu"  #: a kernel, copy or memset running
    STREAM = "stream"  #: previous activity → next activity on the same stream
    SYNC = "sync"  #: GPU activity → the host call that waited for it
    CROSS_STREAM = "cross_stream"  #: event record's work → the activity a stream-wait-event held back
    WAKE = "wake"  #: driving thread → another thread resuming work (inferred)
    WINDOW = "window"  #: step start / end, and GPU work launched before the step


#: a segment's cause (one of the critical-path causes) and edge kind, as enums; its track as a
#: categorical (a few hundred distinct threads and streams over millions of segments)
CAUSE_DTYPE = pl.Enum(list(CP_CAUSES))
EDGE_KIND_DTYPE = pl.Enum([k.value for k in EdgeKind])
#: an edge's tag (:data:`.whatif.TAGS`), as an enum
TAG_DTYPE = pl.Enum(list(TAGS))
#: the dtypes :attr:`CriticalPath.edges` holds in place of :data:`EDGE_SCHEMA`'s strings
_COMPACT_DTYPES: dict[str, pl.DataType] = {"kind": EDGE_KIND_DTYPE, "tag": TAG_DTYPE, "track": pl.Categorical()}

#: the columns of :attr:`CriticalPath.segments`
SEGMENT_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "step": pl.Int64(),
    "seq": pl.Int64(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "dur_ns": pl.Int64(),
    "track": pl.Categorical(),
    "event_id": pl.Int64(),
    "edge_kind": EDGE_KIND_DTYPE,
    "cause": CAUSE_DTYPE,
    "inferred": pl.Boolean(),
}

BREAKDOWN_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "step": pl.Int64(),
    "cause": pl.String(),
    "ns": pl.Int64(),
    "share": pl.Float64(),
}

STEP_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "step": pl.Int64(),
    "complete": pl.Boolean(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "wall_ns": pl.Int64(),
    "path_ns": pl.Int64(),
    "nodes": pl.Int64(),
    "edges": pl.Int64(),
    "sync_edges": pl.Int64(),
    "inferred_sync_edges": pl.Int64(),
    "cycles_broken": pl.Int64(),
}

EDGE_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "step": pl.Int64(),
    "src": pl.Int64(),
    "dst": pl.Int64(),
    "w": pl.Int64(),
    "kind": pl.String(),
    "tag": pl.String(),
    "removable": pl.Boolean(),
    "inferred": pl.Boolean(),
    "event_id": pl.Int64(),
    "track": pl.String(),
    "pid": pl.Int64(),
    "tid": pl.Int64(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
}

#: order in which edges enter a node's predecessor list: on ties the first tight edge wins,
#: so waits are explained by what was waited for rather than by the waiting thread
_PRIORITY = {"sync": 0, "cross_stream": 1, "stream": 2, "gpu": 3, "launch": 4, "wake": 5, "data_loading": 6, "cpu": 7, "window": 8}


@dataclass(frozen=True, eq=False)
class CriticalPath:
    """The critical path of every step of a trace, its breakdown, and the graphs for what-ifs."""

    #: rank, step, seq, start_ns, end_ns, dur_ns, track, event_id, edge_kind, cause, inferred
    #: (:data:`SEGMENT_SCHEMA`: ``track`` categorical, ``edge_kind`` and ``cause`` enums)
    segments: pl.DataFrame
    #: rank, step, cause, ns, share (of the path)
    breakdown: pl.DataFrame
    #: rank, step, complete, start_ns, end_ns, wall_ns, path_ns, nodes, edges, sync_edges,
    #: inferred_sync_edges, cycles_broken
    steps: pl.DataFrame
    #: every step's (contracted) graph: rank, step, src, dst, w, kind, tag, removable, inferred,
    #: event_id, track (null for a host thread's stretches, which carry pid and tid instead),
    #: pid, tid, start_ns, end_ns, run, and w_<tag> for every tag of :data:`.whatif.TAGS` that
    #: carries time on some edge (a tag without a column: zero everywhere; ``kind`` and ``tag``
    #: enums, ``track`` categorical)
    edges: pl.DataFrame
    #: what-ifs computed with the path (the findings', and any the caller asked for)
    what_ifs: tuple[WhatIfResult, ...] = ()
    #: data-quality notes about the graph (inferred syncs, broken chains)
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: the step time every per-step number is stated for (the median step, set by ``diagnose``;
    #: see analysis/steady.py); None: means over complete steps
    stated_step_ms: float | None = None

    @property
    def inferred_sync(self) -> bool:
        """True when some sync dependency came from API names and timing, not sync rows."""
        return bool(self.steps["inferred_sync_edges"].sum() or 0)

    def breakdown_per_step(self) -> dict[str, float]:
        """cause → ms per step on the critical path (mean over complete steps; with
        ``stated_step_ms``, each cause's share of the path times that step time)."""
        complete = self.steps.filter(pl.col("complete")).select(_WIN)
        if complete.height == 0:
            complete = self.steps.select(_WIN)
        rows = self.breakdown.join(complete, on=_WIN, how="semi")
        n = max(complete.height, 1)
        totals = {c: 0.0 for c in CP_CAUSES}
        for cause, ns in rows.group_by("cause").agg(pl.col("ns").sum()).iter_rows():
            totals[str(cause)] = float(ns) / 1e6 / n
        path = sum(totals.values())
        if self.stated_step_ms is not None and path > 0:
            totals = {c: v / path * self.stated_step_ms for c, v in totals.items()}
        return totals

    def breakdown_share(self) -> dict[str, float]:
        """cause → share of the critical path (complete steps)."""
        ms = self.breakdown_per_step()
        total = sum(ms.values())
        return {c: (v / total if total else 0.0) for c, v in ms.items()}

    def what_if(self, factors: Mapping[str, float]) -> WhatIfResult:
        """Predicted step times when the given causes are scaled (see :mod:`.whatif`); stated
        for ``stated_step_ms`` when it is set, like the findings' predictions."""
        result = evaluate(self.edges, self.steps, [WhatIf.of(factors)])[0]
        if self.stated_step_ms is None:
            return result
        from .steady import restate

        return restate(result, self.stated_step_ms)

    def predicted_step_ms(self, cause: str, factor: float = 0.0) -> float | None:
        """Mean predicted step time (complete steps) with one cause scaled by ``factor``."""
        for result in self.what_ifs:
            if result.what_if.factors == ((cause, float(factor)),):
                return result.predicted_step_ms
        return self.what_if({cause: factor}).predicted_step_ms


# --------------------------------------------------------------------------------------------
# entry points


def critical_path(
    events: pl.DataFrame,
    links: pl.DataFrame,
    steps: pl.DataFrame,
    *,
    what_ifs: Sequence[WhatIf] = (),
    batch_events: int = BATCH_EVENTS,
) -> CriticalPath:
    """Build every step's graph, find its longest path, and answer ``what_ifs``.

    ``steps`` is the steps table of :func:`tracekit.analysis.steps.find_steps` (rank, step,
    start_ns, end_ns, cpu_end_ns, complete); a trace with no steps comes as one
    ``whole_trace`` window.  Steps are built in groups of about ``batch_events`` events
    (the result does not depend on the grouping: what couples the steps, such as the
    driving thread and the typical launch latency, is computed over the whole trace).
    """
    whole = _whole_trace(events, links, steps)
    groups = _groups(whole, batch_events)
    latency = _latency(whole, groups) if len(groups) > 1 else None
    compact_parts: list[pl.DataFrame] = []
    segment_parts: list[pl.DataFrame] = []
    step_parts: list[pl.DataFrame] = []
    # each group's breakdown is summed from its own segments (its steps are in no other group),
    # so the whole trace's segments are never grouped at once
    breakdown_parts: list[pl.DataFrame] = []
    # the what-ifs' path lengths, group by group: no weighted copy of every group's edges
    length_parts: list[pl.DataFrame] = []
    first_node = first_run = 0
    last = len(groups) - 1
    for i, win in enumerate(groups):
        graph = _build(whole, win, latency=latency, first_node=first_node)
        if i == last:
            # every group is built: the whole trace's host events, GPU activities and
            # categories go now, before the last contraction and the concatenations below
            del whole
        windows = graph.windows
        first_node = int(graph.nodes["node"].max() or 0) + 1 if graph.nodes.height else first_node  # type: ignore[arg-type]
        compact, runs = _contract(graph.edges)
        del graph  # the uncontracted nodes and edges: not needed past this point, and the largest frames
        segments, step_rows = _longest_paths(windows, compact, runs)
        del runs
        if first_run:
            compact = compact.with_columns(pl.col("run") + first_run)
        first_run = int(compact["run"].max() or 0) + 1 if compact.height else first_run  # type: ignore[arg-type]
        compact_parts.append(compact)
        segment_parts.append(segments)
        step_parts.append(step_rows)
        breakdown_parts.append(_breakdown(segments, step_rows))
        if what_ifs:
            length_parts.append(_scenario_lengths(compact, what_ifs))
        # a tag that carries no time in the group needs no column (most traces use a few tags)
        compact_parts[-1] = _drop_zero_weights(compact)
    compact = _concat_weights(compact_parts)
    segments = _concat(segment_parts)
    step_rows = _concat(step_parts)
    # each step's rows are in cause order within one part: a stable sort by step keeps it
    breakdown = _concat(breakdown_parts).sort(_WIN, maintain_order=True) if len(breakdown_parts) > 1 else breakdown_parts[0]
    results = tuple(_what_if_results(step_rows, _concat(length_parts), what_ifs)) if what_ifs else ()
    return CriticalPath(
        segments=segments,
        breakdown=breakdown,
        steps=step_rows,
        edges=compact,
        what_ifs=results,
        notes=tuple(_notes(events, step_rows)),
    )


def _drop_zero_weights(edges: pl.DataFrame) -> pl.DataFrame:
    """``edges`` without the ``w_<tag>`` columns that are zero on every edge."""
    weights = [c for c in edges.columns if c.startswith("w_")]
    if edges.height == 0:
        return edges.drop(weights)
    nonzero = edges.select(*[(pl.col(c) != 0).any() for c in weights]).row(0)
    return edges.drop([c for c, keep in zip(weights, nonzero, strict=True) if not keep])


def _concat_weights(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """The groups' edges in one frame, with a ``w_<tag>`` column (in tag order) for every tag
    some group has one for: zero in the groups without it."""
    wanted = [f"w_{t}" for t in TAGS if any(f"w_{t}" in p.columns for p in parts)]
    cols = [c for c in parts[0].columns if not c.startswith("w_")] + wanted
    return _concat([
        p.select(*[pl.col(c) if c in p.columns else pl.lit(0, dtype=pl.Int64).alias(c) for c in cols]) for p in parts
    ])


def _concat(parts: list[pl.DataFrame]) -> pl.DataFrame:
    return parts[0] if len(parts) == 1 else pl.concat(parts, how="vertical_relaxed")


def critical_path_window(
    events: pl.DataFrame, links: pl.DataFrame, rank: int, start_ns: int, end_ns: int, *, what_ifs: Sequence[WhatIf] = ()
) -> CriticalPath:
    """The critical path of one rank over an arbitrary window (benchmarks, comparisons)."""
    window = pl.DataFrame(
        {"rank": [rank], "step": [0], "start_ns": [start_ns], "end_ns": [end_ns], "cpu_end_ns": [end_ns], "complete": [True]},
        schema={"rank": pl.Int32, "step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "cpu_end_ns": pl.Int64, "complete": pl.Boolean},
    )
    return critical_path(events, links, window, what_ifs=what_ifs)


def evaluate(edges: pl.DataFrame, steps: pl.DataFrame, what_ifs: Sequence[WhatIf]) -> list[WhatIfResult]:
    """Recompute every step's longest path under each what-if (one graph per step)."""
    if not what_ifs:
        return []
    return _what_if_results(steps, _scenario_lengths(edges, what_ifs), what_ifs)


def _scenario_lengths(edges: pl.DataFrame, what_ifs: Sequence[WhatIf]) -> pl.DataFrame:
    """rank, step, ``_base`` (the longest path's length) and ``_s<i>`` (its length under the
    i-th what-if) of every step of ``edges``."""
    cols = [f"_s{i}" for i in range(len(what_ifs))]
    # only the columns the graphs need, sorted once; each step is a zero-copy slice
    tags = [t for t in TAGS if f"w_{t}" in edges.columns]
    weighted = edges.select(
        *_WIN, "src", "dst", "w", *[scenario_weights(wi, tags).alias(c) for wi, c in zip(what_ifs, cols, strict=True)],
        pl.col("kind").replace_strict(_PRIORITY, return_dtype=pl.Int32).alias("_prio"),
    ).sort(["rank", "step", "_prio", "dst", "src"])
    attrs = ["w", *cols]
    rows = _step_lengths(weighted, attrs)
    return pl.DataFrame(
        [(r, s, *ls) for r, s, ls in rows],
        schema={"rank": pl.Int32, "step": pl.Int64, "_base": pl.Int64, **{c: pl.Int64 for c in cols}},
        orient="row",
    )


def _what_if_results(steps: pl.DataFrame, lengths: pl.DataFrame, what_ifs: Sequence[WhatIf]) -> list[WhatIfResult]:
    """Each what-if's result from the steps' path lengths (:func:`_scenario_lengths`)."""
    out = []
    info = steps.select("rank", "step", "complete", "wall_ns", "path_ns")
    for i, wi in enumerate(what_ifs):
        frame = lengths.select(*_WIN, "_base", pl.col(f"_s{i}").alias("predicted_path_ns"))
        per_step = info.join(frame, on=_WIN, how="left").with_columns(
            (pl.col("wall_ns") - (pl.col("_base") - pl.col("predicted_path_ns"))).alias("predicted_step_ns")
        ).drop("_base").sort(_WIN)
        out.append(_result(wi, per_step))
    return out


def _step_lengths(weighted: pl.DataFrame, attrs: Sequence[str]) -> list[tuple[int, int, list[int]]]:
    """(rank, step, the longest path's length under each weight in ``attrs``) of every step
    of ``weighted`` (edges sorted by step, then in the order they enter each graph)."""
    sizes = weighted.group_by(_WIN, maintain_order=True).len()
    native = _native_dag()
    done: dict[tuple[int, int], list[int]] = {}
    if native is not None and _native_ok(weighted, attrs):
        lengths, _, status, _, _ = native.longest_paths(
            _int64(weighted["src"]), _int64(weighted["dst"]), [_int64(weighted[a]) for a in attrs], _offsets(sizes["len"]), False
        )
        flat, ok = memoryview(lengths).cast("q"), memoryview(status).cast("q")
        k = len(attrs)
        for i, (rank, step) in enumerate(sizes.select(_WIN).iter_rows()):
            if ok[i] == _DAG_OK:
                done[(int(rank), int(step))] = list(flat[i * k : (i + 1) * k])
    rows: list[tuple[int, int, list[int]]] = []
    offset = 0
    for rank, step, n in sizes.iter_rows():
        key = (int(rank), int(step))
        g = weighted.slice(offset, n)
        offset += n
        if key in done:
            rows.append((*key, done[key]))
            continue
        G = nx.DiGraph()
        G.add_edges_from((u, v, dict(zip(attrs, ws, strict=True))) for u, v, *ws in g.select("src", "dst", *attrs).iter_rows())
        topo, _ = _topological(G)
        rows.append((*key, _longest_lengths(G, topo, attrs)))
    return rows


#: the native kernel's status of a graph it solved (others: a cycle, an overflow, no memory,
#: which the networkx path handles)
_DAG_OK = 0


def _native_dag() -> Any:
    """The native longest-path kernel (tracekit/native/_dag.c), or None where it was not
    built or ``TRACEKIT_PURE_PYTHON`` asks for the pure Python path."""
    return load_native("dag")


def _native_ok(edges: pl.DataFrame, weights: Sequence[str]) -> bool:
    """Whether the kernel gives networkx's answer on ``edges``: no missing ids or weights, and
    one edge per node pair (a networkx graph keeps the first position and the last weights of
    a repeated pair; the kernel would keep both)."""
    cols = ["src", "dst", *weights]
    if any(edges[c].null_count() for c in cols):
        return False
    return bool(edges.select(pl.struct("src", "dst").n_unique()).item() == edges.height)


def _int64(s: pl.Series) -> memoryview:
    """The values of an int64 column without nulls, as a buffer (no copy when it is one chunk)."""
    arr = s.cast(pl.Int64).rechunk().to_arrow()
    if len(arr) == 0:
        return memoryview(b"")
    data = arr.buffers()[1]
    return memoryview(data)[arr.offset * 8 : (arr.offset + len(arr)) * 8]


def _offsets(sizes: pl.Series) -> memoryview:
    """Group offsets (0, then the running total of ``sizes``) as an int64 buffer."""
    return _int64(pl.concat([pl.Series([0], dtype=pl.Int64), sizes.cast(pl.Int64).cum_sum()]))


def _longest_lengths(G: nx.DiGraph, topo: Sequence[int], attrs: Sequence[str]) -> list[int]:
    """The longest path's length in ``G`` under each weight in ``attrs``, in one pass over ``topo``.

    The same lengths as ``nx.dag_longest_path`` followed by :func:`_path_length` for each weight
    (a path may start at any node, so a node's distance is never below 0), computed for every
    weight at once instead of one traversal per weight.
    """
    k = len(attrs)
    dist: dict[int, list[int]] = {}
    best = [0] * k
    pred = G.pred
    for v in topo:
        d = [0] * k
        for u, data in pred[v].items():
            du = dist[u]
            for i in range(k):
                x = du[i] + data[attrs[i]]
                if x > d[i]:
                    d[i] = x
        dist[v] = d
        for i in range(k):
            if d[i] > best[i]:
                best[i] = d[i]
    return best


# --------------------------------------------------------------------------------------------
# graph construction


@dataclass(frozen=True)
class Graph:
    """Every step's nodes and edges (node ids are unique across steps)."""

    #: node, rank, step, t; a thread's pid and tid, or a GPU activity's track, event_id and is_end
    nodes: pl.DataFrame
    #: every edge (EDGE_SCHEMA), one per stretch of a thread
    edges: pl.DataFrame
    #: rank, step, complete, start_ns, end_ns
    windows: pl.DataFrame

    @property
    def compact(self) -> pl.DataFrame:
        """The graph the path is computed on: each run of a thread's stretches between two
        instants that something else depends on becomes one edge (``run`` numbers it), with
        its time split by tag in ``w_<tag>`` columns; every path length is unchanged."""
        return _contract(self.edges)[0]


def build_graph(events: pl.DataFrame, links: pl.DataFrame, steps: pl.DataFrame) -> Graph:
    """The dependency graph of every step window (see the module docstring)."""
    whole = _whole_trace(events, links, steps)
    return _build(whole, whole.win)


@dataclass(frozen=True)
class _Whole:
    """What the graph of any window depends on across the whole trace."""

    #: rank and start of the events overlapping the windows' overall extent
    events: pl.DataFrame
    #: every window (:func:`_windows`)
    win: pl.DataFrame
    #: host events of the threads that can be on a path (:func:`_relevant_threads`)
    host: pl.DataFrame
    gpu: pl.DataFrame
    #: rank → driving thread
    main: pl.DataFrame
    blocking: pl.DataFrame
    cross: pl.DataFrame
    #: the timeline's thread-level categories (category → its spans merged per thread, :func:`_thread_cover`)
    categories: dict[str, pl.DataFrame]
    #: operators that dispatched a launch (the direct parent of a launch call), as ``owner``
    dispatchers: pl.DataFrame


#: the columns of the events table the graph is built from (the rest are never copied)
_EVENT_COLUMNS = [
    "event_id", "kind", "name", "rank", "pid", "tid", "device", "stream", "start_ns", "dur_ns", "end_ns", "correlation",
    "src_memory", "dst_memory", "sync_kind", "wait_stream", "wait_event_correlation",
]


def _whole_trace(events: pl.DataFrame, links: pl.DataFrame, steps: pl.DataFrame) -> _Whole:
    win = _windows(steps)
    events = events.select(_EVENT_COLUMNS)
    if win.height:
        # only what overlaps a window can be on a path (a single-window call stays cheap);
        # when that is every event, the table is not copied
        near = (pl.col("end_ns") >= win["w0"].min()) & (pl.col("start_ns") <= win["w1"].max())
        if events.select(near.fill_null(False).sum()).item() < events.height:
            events = events.filter(near)
    host = _host_events(events, links)
    gpu = _gpu_activities(events, links, host)
    main = _main_threads(host, events, links)
    host = host.join(_relevant_threads(host, main, links), on=["rank", *_THREAD], how="semi")
    from .timeline import host_categories

    gpu_ids = events.filter(pl.col("kind").is_in(GPU_ACTIVITY_KINDS)).select(pl.col("event_id").alias("gpu_event_id"))
    launchers = links.join(gpu_ids, on="gpu_event_id", how="semi").select(pl.col("launch_event_id").alias("event_id")).unique()
    # a property of the operator, not of a window: a launch in one step marks its parent in
    # every step it spans (calls inside some window of their rank count)
    extent = win.group_by("rank").agg(pl.col("w0").min().alias("_lo"), pl.col("w1").max().alias("_hi"))
    in_windows = host.join(extent, on="rank").filter((pl.col("end_ns") > pl.col("_lo")) & (pl.col("start_ns") < pl.col("_hi")))
    dispatchers = in_windows.join(launchers, on="event_id", how="semi").select(pl.col("parent").alias("owner")).drop_nulls().unique()
    return _Whole(
        events=events.select("rank", "start_ns"),
        win=win,
        host=host,
        gpu=gpu,
        main=main,
        blocking=_sync_sources(events, links, host, gpu),
        cross=_cross_stream(events, links, host, gpu),
        # merged once here, not once per group
        categories={cat: _thread_cover(spans) for cat, spans in host_categories(events, links, cpu=False).items()},
        dispatchers=dispatchers,
    )


def _groups(whole: _Whole, batch_events: int) -> list[pl.DataFrame]:
    """The windows in groups of consecutive steps of one rank holding about ``batch_events``
    events each (at least one window per group); a small trace is one group."""
    win = whole.win
    if win.height <= 1 or whole.events.height <= batch_events:
        return [win]
    starts = whole.events.select("rank", "start_ns").drop_nulls().sort("start_ns")
    counted = starts.join_asof(
        win.select("rank", "wi", "w0").sort("w0"), left_on="start_ns", right_on="w0", by="rank", strategy="backward", check_sortedness=False
    ).group_by("rank", "wi").len()
    sized = win.join(counted, on=["rank", "wi"], how="left").sort(["rank", "wi"]).with_columns(pl.col("len").fill_null(0))
    # a new group starts where the running count (per rank) passes another multiple of batch_events
    group = ((pl.col("len").cum_sum().over("rank") - pl.col("len")) // batch_events).alias("_group")
    sized = sized.with_columns(group)
    return [g.drop("len", "_group") for g in sized.partition_by("rank", "_group", maintain_order=True)]


def _assigned(whole: _Whole, win: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The host and GPU rows of the windows ``win``, clipped to them (see :func:`_assign`)."""
    if win.height < whole.win.height:
        near = (pl.col("end_ns") >= win["w0"].min()) & (pl.col("start_ns") <= win["w1"].max())
        return _assign(whole.host.filter(near), win), _assign(whole.gpu.filter(near), win)
    return _assign(whole.host, win), _assign(whole.gpu, win)


def _number_gpu(gpu_w: pl.DataFrame, base: int) -> pl.DataFrame:
    """Node ids of every activity's start and end, from ``base`` on, and its track name."""
    gpu_w = gpu_w.with_row_index("_g").with_columns(
        (pl.col("_g").cast(pl.Int64) * 2 + base).alias("n_start"), (pl.col("_g").cast(pl.Int64) * 2 + base + 1).alias("n_end")
    ).drop("_g")
    return gpu_w.with_columns(pl.format("gpu {}/{}", "device", pl.col("stream").fill_null(-1)).alias("track"))


def _latency(whole: _Whole, groups: list[pl.DataFrame]) -> pl.DataFrame:
    """rank → typical launch latency over every window, when the windows are built in groups
    (one group computes it from its own activities, which are then all of them).

    Only what decides a sample is carried: of the host events, the calls that launched an
    activity (the only rows an activity's launch is looked up in), and of both tables the
    columns :func:`_activities` reads; each row is assigned to its windows as in :func:`_build`,
    so the samples are the same."""
    gpu = whole.gpu.select("rank", "device", "stream", "event_id", "start_ns", "end_ns", "call_id")
    host = whole.host.join(gpu.select(pl.col("call_id").alias("event_id")).drop_nulls().unique(), on="event_id", how="semi").select(
        "rank", "pid", "tid", "event_id", "start_ns", "end_ns"
    )
    narrow = dataclasses.replace(whole, host=host, gpu=gpu)
    samples = []
    for win in groups:
        host_w, gpu_w = _assigned(narrow, win)
        gpu_w = gpu_w.with_row_index("_g").with_columns((pl.col("_g").cast(pl.Int64) * 2 + 1).alias("n_end")).drop("_g")
        acts = _activities(gpu_w, host_w, whole.cross, lambda f: f.with_columns(pl.lit(None, dtype=pl.Int64).alias("_c_node")))
        samples.append(acts.filter(~pl.col("_gpu_bound") & pl.col("_c").is_not_null()).select("rank", (pl.col("cs") - pl.col("_c")).alias("_d")))
    return pl.concat(samples).group_by("rank").agg(pl.col("_d").median().cast(pl.Int64).alias("_lat"))


def _build(whole: _Whole, win: pl.DataFrame, *, latency: pl.DataFrame | None = None, first_node: int = 0) -> Graph:
    """The graph of the windows ``win`` (all of ``whole.win`` or a group of them), node ids
    from ``first_node`` on; ``latency`` is the whole trace's when ``win`` is a group."""
    host_w, gpu_w = _assigned(whole, win)
    chain = _chains(host_w, win, whole.main, whole.categories, whole.dispatchers)
    blocking, cross = whole.blocking, whole.cross

    # ---------------------------------------------------------------- node ids
    # one row per instant, in (rank, step, pid, tid, t) order already (see _chains)
    chain_nodes = chain.select(*_CHAIN, "t", "main")
    n_win = win.height
    st = win.select(*_WIN).with_row_index("_w").with_columns(
        (pl.col("_w").cast(pl.Int64) * 2 + first_node).alias("S"), (pl.col("_w").cast(pl.Int64) * 2 + 1 + first_node).alias("T")
    ).drop("_w")
    base = first_node + 2 * n_win
    chain_nodes = chain_nodes.with_row_index("node").with_columns((pl.col("node").cast(pl.Int64) + base).alias("node"))
    # each instant's node travels with its row; the next instant of its thread is the next node
    chain = chain.with_columns(chain_nodes["node"].alias("_node"))
    base += chain_nodes.height
    gpu_w = _number_gpu(gpu_w, base)
    node_of = chain_nodes.select(*_CHAIN, "t", "node")

    def at(frame: pl.DataFrame, pid: str, tid: str, t: str, alias: str) -> pl.DataFrame:
        keyed = node_of.rename({"pid": pid, "tid": tid, "t": t, "node": alias})
        return frame.join(keyed, on=["rank", "step", pid, tid, t], how="left")

    parts: list[pl.DataFrame] = []

    # ---------------------------------------------------------------- hand-off: the driver waited for a helper
    # An untraced stretch of the driving thread (no event, or a user range's own time) that
    # ends after a helper thread went idle
    # (the main thread blocked in backward() while the autograd thread launched the
    # kernels) was a wait for that helper: the helper's last instant hands over to the driver.
    helpers = bool(chain.select((~pl.col("main")).any()).item())
    if helpers:
        untraced = pl.col("owner").is_null() | (pl.col("_okind") == EventKind.ANNOTATION.value)
        gaps = chain.filter(pl.col("main") & untraced & pl.col("t_next").is_not_null() & (pl.col("tag") == "cpu"))
        idle = chain.filter(~pl.col("main") & pl.col("idles")).select(*_WIN, pl.col("t").alias("_ht"), pl.col("_node").alias("src"))
        handed = gaps.select(*_CHAIN, "t", "t_next", (pl.col("_node") + 1).alias("dst")).sort("t_next").join_asof(
            idle.sort("_ht"), left_on="t_next", right_on="_ht", by=_WIN, strategy="backward", check_sortedness=False
        ).filter(pl.col("_ht").is_not_null() & (pl.col("_ht") > pl.col("t")))
        parts.append(
            handed.select(
                *_WIN, "src", "dst", (pl.col("t_next") - pl.col("_ht")).alias("w"), pl.lit(EdgeKind.WAKE.value).alias("kind"),
                pl.lit("cpu").alias("tag"), pl.lit(False).alias("removable"), pl.lit(True).alias("inferred"),
                pl.lit(None, dtype=pl.Int64).alias("event_id"), pl.format("cpu {}/{}", "pid", "tid").alias("track"),
                pl.col("_ht").alias("start_ns"), pl.col("t_next").alias("end_ns"),
            )
        )
        waited_for = handed.select(*_CHAIN, "t").with_columns(pl.lit(True).alias("_handed"))
        chain = chain.join(waited_for, on=[*_CHAIN, "t"], how="left", maintain_order="left").with_columns(
            pl.when(pl.col("_handed").fill_null(False)).then(pl.lit("wait")).otherwise(pl.col("tag")).alias("tag")
        ).drop("_handed")

    # ---------------------------------------------------------------- thread chains
    segs = chain.filter(pl.col("t_next").is_not_null()).with_columns(pl.col("_node").alias("src"), (pl.col("_node") + 1).alias("dst"))
    # a blocking call's own duration: only what it spent after the GPU work it waited for
    own = blocking.select("rank", pl.col("call_id").alias("owner"), pl.col("g_end").alias("_g"))
    segs = segs.join(own, on=["rank", "owner"], how="left")
    waited = pl.col("_g").is_not_null() & (pl.col("t_next") == pl.col("_owner_end")) & (pl.col("_g") <= pl.col("t_next"))
    seg_w = pl.when(pl.col("tag") == "wait").then(0).when(waited).then(
        pl.min_horizontal(pl.col("t_next") - pl.col("t"), pl.col("t_next") - pl.col("_g"))
    ).otherwise(pl.col("t_next") - pl.col("t"))
    parts.append(
        segs.select(
            *_WIN, "src", "dst", seg_w.alias("w"),
            pl.when(pl.col("tag") == "data_loading").then(pl.lit(EdgeKind.DATA_LOADING.value)).otherwise(pl.lit(EdgeKind.CPU.value)).alias("kind"),
            "tag", pl.lit(False).alias("removable"), pl.lit(False).alias("inferred"), pl.col("owner").alias("event_id"),
            # a thread stretch's track is formatted only if it ends up on the path (there are many)
            pl.lit(None, dtype=pl.String).alias("track"), "pid", "tid", pl.col("t").alias("start_ns"), pl.col("t_next").alias("end_ns"),
        )
    )

    # ---------------------------------------------------------------- GPU activities
    parts.append(
        gpu_w.select(
            *_WIN, pl.col("n_start").alias("src"), pl.col("n_end").alias("dst"), (pl.col("ce") - pl.col("cs")).alias("w"),
            pl.lit(EdgeKind.GPU.value).alias("kind"), "tag", pl.lit(False).alias("removable"), pl.lit(False).alias("inferred"),
            "event_id", "track", pl.col("cs").alias("start_ns"), pl.col("ce").alias("end_ns"),
        )
    )

    acts = _activities(gpu_w, host_w, cross, lambda f: at(f, "_cpid", "_ctid", "_c", "_c_node"))
    lat = _typical_latency(acts) if latency is None else latency
    acts = acts.join(lat, on="rank", how="left").with_columns(pl.col("_lat").fill_null(0))
    launch_w = pl.when(pl.col("_gpu_bound")).then(pl.min_horizontal(pl.col("cs") - pl.col("_c"), pl.col("_lat"))).otherwise(pl.col("cs") - pl.col("_c"))
    launch_tag = pl.when(pl.col("tag") == "pageable_memcpy").then(pl.lit("pageable_memcpy")).otherwise(pl.lit("launch"))
    parts.append(
        acts.filter(pl.col("_c").is_not_null() & pl.col("_c_node").is_not_null()).select(
            *_WIN, pl.col("_c_node").alias("src"), pl.col("n_start").alias("dst"), launch_w.alias("w"),
            pl.lit(EdgeKind.LAUNCH.value).alias("kind"), launch_tag.alias("tag"), pl.lit(False).alias("removable"),
            pl.lit(False).alias("inferred"), pl.col("call_id").alias("event_id"), "track", pl.col("_c").alias("start_ns"),
            pl.col("cs").alias("end_ns"),
        )
    )
    tight_p = pl.col("_gpu_bound") & (pl.col("_p") == pl.col("_q"))
    parts.append(
        acts.filter(pl.col("_p").is_not_null()).select(
            *_WIN, pl.col("_p_node").alias("src"), pl.col("n_start").alias("dst"),
            # activities that overlap on a stream (µs rounding) get a negative weight, never a gain
            pl.when(tight_p).then(pl.col("cs") - pl.col("_p")).otherwise(pl.min_horizontal(pl.lit(0), pl.col("cs") - pl.col("_p"))).alias("w"),
            pl.lit(EdgeKind.STREAM.value).alias("kind"), pl.lit("launch").alias("tag"), pl.lit(False).alias("removable"),
            pl.lit(False).alias("inferred"), pl.lit(None, dtype=pl.Int64).alias("event_id"), "track",
            pl.col("_p").alias("start_ns"), pl.col("cs").alias("end_ns"),
        )
    )
    tight_x = pl.col("_gpu_bound") & (pl.col("_x") == pl.col("_q"))
    parts.append(
        acts.filter(pl.col("_x").is_not_null()).select(
            *_WIN, pl.col("_x_node").alias("src"), pl.col("n_start").alias("dst"),
            pl.when(tight_x).then(pl.col("cs") - pl.col("_x")).otherwise(0).alias("w"),
            pl.lit(EdgeKind.CROSS_STREAM.value).alias("kind"), pl.lit("launch").alias("tag"), pl.lit(False).alias("removable"),
            pl.col("_x_inferred").alias("inferred"), pl.lit(None, dtype=pl.Int64).alias("event_id"), "track",
            pl.col("_x").alias("start_ns"), pl.col("cs").alias("end_ns"),
        )
    )
    # work launched before the step (or by nothing recorded) that starts inside it
    orphans = acts.filter(pl.col("_q").is_null() & (pl.col("_c").is_null() | pl.col("_c_node").is_null()))
    parts.append(
        orphans.join(st, on=_WIN).join(win.select(*_WIN, "w0"), on=_WIN).select(
            *_WIN, pl.col("S").alias("src"), pl.col("n_start").alias("dst"), (pl.col("cs") - pl.col("w0")).alias("w"),
            pl.lit(EdgeKind.WINDOW.value).alias("kind"), pl.lit("launch").alias("tag"), pl.lit(False).alias("removable"),
            pl.lit(False).alias("inferred"), pl.lit(None, dtype=pl.Int64).alias("event_id"), "track",
            pl.col("w0").alias("start_ns"), pl.col("cs").alias("end_ns"),
        )
    )

    # ---------------------------------------------------------------- sync: GPU → host
    sync = blocking.join(
        host_w.select(*_WIN, pl.col("event_id").alias("call_id"), "pid", "tid", pl.col("cs").alias("_c0"), pl.col("ce").alias("_c1"), pl.col("end_ns").alias("_true_end")),
        on=["rank", "call_id"],
    )
    sync = sync.join(gpu_w.select(*_WIN, pl.col("event_id").alias("src_id"), pl.col("ce").alias("_g_ce"), "n_end"), on=[*_WIN, "src_id"])
    # the call's end may be cut by the window's end; the wait still ends there
    sync = sync.filter((pl.col("_g_ce") == pl.col("g_end")) & (pl.col("g_end") <= pl.col("_c1")))
    sync = at(sync, "pid", "tid", "_c1", "dst")
    parts.append(
        sync.filter(pl.col("dst").is_not_null()).select(
            *_WIN, pl.col("n_end").alias("src"), "dst",
            pl.min_horizontal(pl.col("_c1") - pl.col("_c0"), pl.col("_c1") - pl.col("g_end")).alias("w"),
            # a wait on a full launch queue is not a sync the user can remove
            pl.lit(EdgeKind.SYNC.value).alias("kind"), "tag", (pl.col("tag") != "launch").alias("removable"), "inferred",
            pl.col("call_id").alias("event_id"), pl.format("cpu {}/{}", "pid", "tid").alias("track"),
            pl.col("g_end").alias("start_ns"), pl.col("_c1").alias("end_ns"),
        )
    )

    # ---------------------------------------------------------------- wake: other threads resuming
    if helpers:
        first = chain.filter(~pl.col("main") & pl.col("resumes")).select(*_CHAIN, "t", pl.col("_node").alias("dst"))
        mains = chain_nodes.filter(pl.col("main")).select(*_WIN, pl.col("t").alias("_mt"), pl.col("node").alias("_mnode"), pl.col("pid").alias("_mpid"), pl.col("tid").alias("_mtid")).sort("_mt")
        woken = first.sort("t").join_asof(mains, left_on="t", right_on="_mt", by=_WIN, strategy="backward", allow_exact_matches=False, check_sortedness=False)
        woken = woken.join(st, on=_WIN).join(win.select(*_WIN, "w0"), on=_WIN)
        parts.append(
            woken.select(
                *_WIN, pl.coalesce("_mnode", "S").alias("src"), "dst", (pl.col("t") - pl.coalesce("_mt", "w0")).alias("w"),
                pl.lit(EdgeKind.WAKE.value).alias("kind"), pl.lit("cpu").alias("tag"), pl.lit(False).alias("removable"),
                pl.lit(True).alias("inferred"), pl.lit(None, dtype=pl.Int64).alias("event_id"),
                pl.format("cpu {}/{}", "pid", "tid").alias("track"), pl.coalesce("_mt", "w0").alias("start_ns"), pl.col("t").alias("end_ns"),
            )
        )

    # ---------------------------------------------------------------- S and T
    main_first = chain_nodes.filter(pl.col("main")).sort("t").unique(_WIN, keep="first").join(st, on=_WIN).join(win.select(*_WIN, "w0"), on=_WIN)
    parts.append(
        main_first.select(
            *_WIN, pl.col("S").alias("src"), pl.col("node").alias("dst"), (pl.col("t") - pl.col("w0")).alias("w"),
            pl.lit(EdgeKind.WINDOW.value).alias("kind"), pl.lit("cpu").alias("tag"), pl.lit(False).alias("removable"),
            pl.lit(False).alias("inferred"), pl.lit(None, dtype=pl.Int64).alias("event_id"),
            pl.format("cpu {}/{}", "pid", "tid").alias("track"), pl.col("w0").alias("start_ns"), pl.col("t").alias("end_ns"),
        )
    )
    edges = pl.concat([_conform_edges(p) for p in parts])
    edges = edges.filter(pl.col("src").is_not_null() & pl.col("dst").is_not_null())

    nodes = pl.concat(
        [
            chain_nodes.select("node", *_WIN, "t", "pid", "tid"),
            gpu_w.select(pl.col("n_start").alias("node"), *_WIN, pl.col("cs").alias("t"), "track", "event_id", pl.lit(False).alias("is_end")),
            gpu_w.select(pl.col("n_end").alias("node"), *_WIN, pl.col("ce").alias("t"), "track", "event_id", pl.lit(True).alias("is_end")),
        ],
        how="diagonal_relaxed",
    )
    # every node without a successor finishes into T
    sinks = nodes.join(edges.select(pl.col("src").alias("node")).unique(), on="node", how="anti").join(st, on=_WIN).join(
        win.select(*_WIN, "w1"), on=_WIN
    )
    t_edges = sinks.select(
        *_WIN, pl.col("node").alias("src"), pl.col("T").alias("dst"), pl.lit(0, dtype=pl.Int64).alias("w"),
        pl.lit(EdgeKind.WINDOW.value).alias("kind"), pl.lit("cpu").alias("tag"), pl.lit(False).alias("removable"),
        pl.lit(False).alias("inferred"), pl.lit(None, dtype=pl.Int64).alias("event_id"), "track", "pid", "tid",
        pl.col("t").alias("start_ns"), pl.col("t").alias("end_ns"),
    )
    edges = pl.concat([edges, _conform_edges(t_edges)])
    # one edge per node pair: only GPU → GPU edges can repeat one (a stream predecessor that is
    # also the cross-stream source); keep the tightest
    gpu_pairs = pl.col("kind").is_in([EdgeKind.STREAM.value, EdgeKind.CROSS_STREAM.value])
    twice = edges.filter(gpu_pairs).sort(["src", "dst", "w"], descending=[False, False, True]).unique(["src", "dst"], keep="first")
    edges = pl.concat([edges.filter(~gpu_pairs), twice])
    st_nodes = st.unpivot(index=_WIN, on=["S", "T"], variable_name="_which", value_name="node").join(win.select(*_WIN, "w0", "w1"), on=_WIN)
    nodes = pl.concat(
        [nodes, st_nodes.select("node", *_WIN, pl.when(pl.col("_which") == "S").then(pl.col("w0")).otherwise(pl.col("w1")).alias("t"))],
        how="diagonal_relaxed",
    )
    return Graph(nodes=nodes, edges=edges, windows=win.select(*_WIN, "complete", pl.col("w0").alias("start_ns"), pl.col("w1").alias("end_ns")))


# --------------------------------------------------------------------------------------------
# building blocks


def _conform_edges(part: pl.DataFrame) -> pl.DataFrame:
    """An edge frame with exactly EDGE_SCHEMA's columns (absent ones null)."""
    return part.select(
        [(pl.col(c) if c in part.columns else pl.lit(None)).cast(t).alias(c) for c, t in EDGE_SCHEMA.items()]
    )


def _windows(steps: pl.DataFrame) -> pl.DataFrame:
    win = steps.select(
        pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int64), pl.col("start_ns").alias("w0"), pl.col("end_ns").alias("w1"),
        pl.col("cpu_end_ns"), pl.col("complete"),
    ).filter(pl.col("w1") > pl.col("w0")).sort(["rank", "w0"])
    idx = pl.int_range(pl.len()).over("rank")
    win = win.with_columns(idx.alias("wi"), (idx == pl.len().over("rank") - 1).alias("_last"))
    # the driving thread's chain ends where the step's CPU work ends when nothing follows it
    # (the last window runs on to the end of the GPU work it launched)
    main_end = pl.when(pl.col("_last")).then(pl.col("cpu_end_ns").clip(pl.col("w0"), pl.col("w1"))).otherwise(pl.col("w1"))
    return win.with_columns(main_end.fill_null(pl.col("w1")).alias("main_end")).drop("_last")


def _host_events(events: pl.DataFrame, links: pl.DataFrame) -> pl.DataFrame:
    """Host-thread events with nesting depth and parent (per thread, on their full extent)."""
    keep = ["rank", "pid", "tid", "event_id", "kind", "name", "start_ns", "end_ns", "correlation"]
    host = events.filter(
        pl.col("kind").is_in(_HOST) & pl.col("pid").is_not_null() & pl.col("tid").is_not_null() & (pl.col("dur_ns") > 0)
    ).select(keep)
    # explicit sync rows without a recorded API call stand for the call on their thread
    rows = events.filter(
        is_host_wait_row() & pl.col("tid").is_not_null()
        & pl.col("pid").is_not_null() & (pl.col("dur_ns") > 0)
    )
    rows = rows.join(links.select(pl.col("gpu_event_id").alias("event_id")), on="event_id", how="anti").select(keep)
    host = pl.concat([host, rows]).with_columns(pl.col("kind").cast(pl.String))
    host = host.sort([*_THREAD, "start_ns", "end_ns", "event_id"], descending=[False, False, False, True, False])
    order = pl.int_range(pl.len()).over(_THREAD)
    ended = pl.col("end_ns").sort().search_sorted(pl.col("start_ns"), side="right").over(_THREAD)
    host = host.with_columns(order.alias("_ord"), ended.alias("_ended"))
    host = host.with_columns((pl.col("_ord") - pl.col("_ended")).clip(lower_bound=0).alias("depth")).drop("_ended")
    # each row's parent comes back to the row by its position (an as-of join keeps its left
    # side's order): a sort of the row numbers instead of a hash join on event_id
    left = host.select(*_THREAD, "_ord", (pl.col("depth") - 1).alias("_pd")).with_row_index("_row")
    right = host.select(*_THREAD, pl.col("_ord").alias("_pord"), pl.col("depth").alias("_pd"), pl.col("event_id").alias("parent"))
    parents = left.sort("_ord").join_asof(
        right.sort("_pord"), left_on="_ord", right_on="_pord", by=[*_THREAD, "_pd"], strategy="backward",
        allow_exact_matches=False, check_sortedness=False,
    ).select("_row", "parent").sort("_row")
    return host.drop("_ord").with_columns(parents["parent"])


def _gpu_activities(events: pl.DataFrame, links: pl.DataFrame, host: pl.DataFrame) -> pl.DataFrame:
    gpu = events.filter(pl.col("kind").is_in(GPU_ACTIVITY_KINDS) & pl.col("device").is_not_null() & (pl.col("dur_ns") > 0) & pl.col("rank").is_not_null())
    name = pl.col("name")
    kernel = pl.col("kind") == EventKind.KERNEL.value
    pageable = (pl.col("kind") == EventKind.MEMCPY.value) & ((pl.col("src_memory") == "pageable") | (pl.col("dst_memory") == "pageable"))
    tag = (
        pl.when(kernel & name.str.contains(patterns.COMM_KERNEL)).then(pl.lit("comm_kernel"))
        .when(kernel & name.str.contains(patterns.FP32_GEMM_KERNEL)).then(pl.lit("fp32_matmul"))
        .when(kernel).then(pl.lit("kernel"))
        .when(pageable).then(pl.lit("pageable_memcpy"))
        .otherwise(pl.lit("memcpy"))
    )
    launch_of = links.unique("gpu_event_id", keep="first").select(pl.col("gpu_event_id").alias("event_id"), pl.col("launch_event_id").alias("call_id"))
    calls = host.select(pl.col("event_id").alias("call_id"), pl.col("start_ns").alias("launch_ns"), pl.col("pid").alias("call_pid"), pl.col("tid").alias("call_tid"))
    gpu = gpu.select("rank", "device", "stream", "event_id", "start_ns", "end_ns", tag.alias("tag")).with_columns(pl.col("stream").fill_null(-1))
    gpu = gpu.join(launch_of, on="event_id", how="left").join(calls, on="call_id", how="left")
    # the instant the work was handed to the GPU; when a rank records launches, work without
    # one was launched before the capture began (a deep queue carries it over), otherwise
    # only its start is known
    linked = pl.col("launch_ns").is_not_null().any().over("rank")
    before_capture = pl.col("start_ns").min().over("rank") - 1
    unknown = pl.when(linked).then(before_capture).otherwise(pl.col("start_ns"))
    return gpu.with_columns(pl.coalesce(pl.min_horizontal("launch_ns", "start_ns"), unknown).alias("launch_t"))


def _main_threads(host: pl.DataFrame, events: pl.DataFrame, links: pl.DataFrame) -> pl.DataFrame:
    """rank → the thread that drives the steps.

    The thread holding the ranges steps are found from (ProfilerStep, user steps, optimizer
    steps, DataLoader fetches) runs the training loop; the autograd engine's thread often
    issues more launches, so launches only decide when no such range exists.
    """
    name = pl.col("name")
    launchers = links.select(pl.col("launch_event_id").alias("event_id")).unique()
    launch_ids = host.join(launchers, on="event_id", how="semi").select("event_id").with_columns(pl.lit(1).alias("_l"))
    markers = (
        name.str.contains(patterns.PROFILER_STEP) | name.str.contains(patterns.USER_STEP)
        | name.str.contains(patterns.OPTIMIZER_STEP) | name.str.contains(r"(?i)enumerate\(DataLoader\)|DataLoaderIter\.__next__")
    )
    score = host.join(launch_ids, on="event_id", how="left").group_by("rank", *_THREAD).agg(
        markers.sum().alias("_steps"), pl.col("_l").sum().alias("_launches"), pl.len().alias("_n"),
    )
    return score.sort(["rank", "_steps", "_launches", "_n", "pid", "tid"], descending=[False, True, True, True, False, False]).unique(
        "rank", keep="first"
    ).select("rank", *_THREAD)


def _relevant_threads(host: pl.DataFrame, main: pl.DataFrame, links: pl.DataFrame) -> pl.DataFrame:
    """The driving thread and every thread that launches GPU work or waits for it.

    Another thread's timeline has no edge to the GPU or to the driving thread, so it can
    never lengthen a path; leaving it out keeps traces with many helper threads cheap.
    """
    launches = host.join(links.select(pl.col("launch_event_id").alias("event_id")).unique(), on="event_id", how="semi")
    waits = host.filter(
        (pl.col("kind") == EventKind.SYNC.value)
        | is_blocking_call()
    )
    return pl.concat([main, launches.select("rank", *_THREAD), waits.select("rank", *_THREAD)]).unique()


def _assign(rows: pl.DataFrame, win: pl.DataFrame) -> pl.DataFrame:
    """One row per (row, window it overlaps), with step, w0, w1 and the clipped extent cs/ce."""
    w = win.select("rank", "wi", "w0").sort("w0")
    a = rows.sort("start_ns").join_asof(
        w.rename({"wi": "_wa", "w0": "_w0a"}), left_on="start_ns", right_on="_w0a", by="rank", strategy="backward", check_sortedness=False
    )
    a = a.with_columns((pl.col("end_ns") - 1).alias("_last_ns")).sort("_last_ns").join_asof(
        w.rename({"wi": "_wb", "w0": "_w0b"}), left_on="_last_ns", right_on="_w0b", by="rank", strategy="backward", check_sortedness=False
    )
    a = a.filter(pl.col("_wb").is_not_null()).with_columns(pl.col("_wa").fill_null(0))
    a = a.with_columns(pl.int_ranges("_wa", pl.col("_wb") + 1).alias("wi")).explode("wi").drop("_wa", "_wb", "_w0a", "_w0b", "_last_ns")
    a = a.with_columns(pl.col("wi").cast(pl.Int64)).join(win.with_columns(pl.col("wi").cast(pl.Int64)), on=["rank", "wi"])
    a = a.filter((pl.col("start_ns") < pl.col("w1")) & (pl.col("end_ns") > pl.col("w0")))
    return a.with_columns(
        pl.max_horizontal("start_ns", "w0").alias("cs"), pl.min_horizontal("end_ns", "w1").alias("ce")
    ).filter(pl.col("ce") > pl.col("cs"))


def _chains(
    host_w: pl.DataFrame, win: pl.DataFrame, main: pl.DataFrame, cats: Mapping[str, pl.DataFrame], dispatchers: pl.DataFrame
) -> pl.DataFrame:
    """Every host thread's timeline in every window, cut at every event boundary.

    One row per instant ``t`` of a thread (rank, step, pid, tid), sorted by those and ``t``
    (every join below is a left join that keeps that order and adds no row), with the next instant
    ``t_next`` (null for the last), the innermost event open in between (``owner``) and the
    tag of that stretch.
    """
    g = [*_CHAIN, "t"]
    # who owns the stretch after t: the deepest event starting at t, else the parent of the
    # outermost event ending at t (if it is still open).  One sort puts that candidate first
    # among the boundaries at t: starts by depth (deepest first), then ends by depth.
    starts = host_w.select(*_CHAIN, pl.col("cs").alias("t"), pl.col("event_id").alias("_cand"), (-pl.col("depth")).alias("_prio"))
    ends = host_w.select(*_CHAIN, pl.col("ce").alias("t"), pl.col("parent").alias("_cand"), (pl.col("depth") + 1_000_000).alias("_prio"))
    anchors = win.join(main, on="rank").select("rank", "step", "pid", "tid", "w0", "main_end")
    anchors = pl.concat([anchors.select(*_CHAIN, pl.col("w0").alias("t")), anchors.select(*_CHAIN, pl.col("main_end").alias("t"))])
    anchors = anchors.with_columns(pl.lit(None, dtype=pl.Int64).alias("_cand"), pl.lit(2_000_000, dtype=pl.Int64).alias("_prio"))
    bounds = pl.concat([starts, ends, anchors.select(starts.columns)], how="vertical_relaxed")
    chain = bounds.sort([*g, "_prio", "_cand"])
    # the first row of every instant (sorted: an instant's rows are adjacent; no key is null)
    chain = chain.filter(pl.any_horizontal([(pl.col(c) != pl.col(c).shift(1)).fill_null(True) for c in g]))
    # the candidate's extent, and what the owner is (an owner is always its instant's
    # candidate, an event of the same thread and window: one join serves both)
    extents = host_w.select(
        *_CHAIN, pl.col("event_id").alias("_cand"), pl.col("cs").alias("_pcs"), pl.col("ce").alias("_pce"),
        pl.col("kind").alias("_ckind"), pl.col("name").alias("_cname"),
    )
    chain = chain.join(extents, on=[*_CHAIN, "_cand"], how="left", maintain_order="left")
    is_start = pl.col("_prio") <= 0
    still_open = (pl.col("_pcs") <= pl.col("t")) & (pl.col("t") < pl.col("_pce"))
    owned = is_start | still_open
    chain = chain.select(
        *g, pl.when(owned).then(pl.col("_cand")).otherwise(None).alias("owner"),
        pl.when(owned).then(pl.col("_ckind")).otherwise(None).alias("_okind"), pl.when(owned).then(pl.col("_cname")).otherwise(None).alias("_oname"),
        pl.when(owned).then(pl.col("_pce")).otherwise(None).alias("_owner_end"),
    ).with_columns(pl.col("t").shift(-1).over(_CHAIN).alias("t_next"))
    chain = chain.join(main.with_columns(pl.lit(True).alias("main")), on=["rank", *_THREAD], how="left", maintain_order="left").with_columns(
        pl.col("main").fill_null(False)
    )

    # what each stretch is: the thread-level categories of the timeline analysis (first
    # match wins), then the owner event itself
    order = [
        ("data_loading", "data_loading"), ("pageable_memcpy", "pageable_memcpy"), ("host_device_sync", "sync"),
        ("allocator", "allocator"), ("exposed_communication", "collective"),
    ]
    chain = chain.with_columns(_covered(chain, {f"_in_{tag}": cats[cat] for cat, tag in order}))
    # an API call inside a copy operator keeps its own meaning (CUDA initialisation, an
    # allocation): only the copy call and the operators' own time are the copy's cost
    other_api = pl.col("_okind").is_in(LAUNCH_KINDS) & ~pl.col("_oname").str.contains(patterns.MEMCPY_API)
    chain = chain.with_columns((pl.col("_in_pageable_memcpy") & ~other_api.fill_null(False)).alias("_in_pageable_memcpy"))
    cat_tag: Any = pl.lit(None, dtype=pl.String)
    for _cat, tag in reversed(order):
        cat_tag = pl.when(pl.col(f"_in_{tag}")).then(pl.lit(tag)).otherwise(cat_tag)
    chain = chain.with_columns(cat_tag.alias("_cat")).drop([f"_in_{tag}" for _c, tag in order])
    # operators that dispatch a launch (the direct parent of a launch call)
    chain = chain.join(dispatchers.with_columns(pl.lit(True).alias("_dispatch")), on="owner", how="left", maintain_order="left")
    own_tag = (
        pl.when(pl.col("_okind").is_in(LAUNCH_KINDS)).then(pl.lit("launch"))
        .when(pl.col("_okind") == EventKind.SYNC.value).then(pl.lit("sync"))
        .when(pl.col("_dispatch").fill_null(False) & (pl.col("_okind") == EventKind.CPU_OP.value)).then(pl.lit("launch"))
        # untraced time: work on the driving thread and in a helper's short gaps, a wait otherwise
        .when(pl.col("owner").is_not_null() | pl.col("main") | ((pl.col("t_next") - pl.col("t")) < HELPER_IDLE_NS)).then(pl.lit("cpu"))
        .otherwise(pl.lit("wait"))
    )
    chain = chain.with_columns(pl.coalesce("_cat", own_tag).alias("tag")).drop("_cat")
    # a helper thread resumes after a wait (or at its first instant), and goes idle before one
    prev_tag = pl.col("tag").shift(1).over(_CHAIN)
    chain = chain.with_columns(
        ((prev_tag.is_null() | (prev_tag == "wait")) & pl.col("t_next").is_not_null()).alias("resumes"),
        ((pl.col("tag") == "wait") | pl.col("t_next").is_null()).alias("idles"),
    )
    return chain.drop("_oname", "_dispatch")


def _thread_cover(spans: pl.DataFrame) -> pl.DataFrame:
    """``spans`` merged per thread (pid, tid) as ``_us``/``_ue``, sorted by ``_us`` (what :func:`_covered` looks up)."""
    merged = union(spans.filter(pl.col("tid").is_not_null()), _THREAD)
    return merged.rename({"start_ns": "_us", "end_ns": "_ue"}).sort("_us")


def _covered(points: pl.DataFrame, covers: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
    """For each name → merged spans (:func:`_thread_cover`), whether each point's instant
    ``t`` lies inside one of its thread's spans: one boolean column per name, in the
    points' order (the points are sorted by time once for all of them)."""
    if points.height == 0:
        return pl.DataFrame({name: pl.Series([], dtype=pl.Boolean) for name in covers})
    keyed = points.select(*_THREAD, "t").with_row_index("_row").sort("t")
    flags: list[pl.Expr] = []
    for i, (name, u) in enumerate(covers.items()):
        if u.height == 0:
            flags.append(pl.col("_row").is_null().alias(name))  # no span: False for every point
            continue
        us, ue = f"_us{i}", f"_ue{i}"
        keyed = keyed.join_asof(
            u.rename({"_us": us, "_ue": ue}), left_on="t", right_on=us, by=_THREAD, strategy="backward", check_sortedness=False
        )
        flags.append((pl.col(ue).is_not_null() & (pl.col("t") < pl.col(ue))).alias(name))
    return keyed.sort("_row").select(flags)


def _inferred_cross(acts: pl.DataFrame, gpu_w: pl.DataFrame) -> pl.DataFrame:
    """Cross-stream waits inferred from timing (rank, step, dst_id, _x, _x_node, inferred).

    Work that started more than :data:`LAUNCH_LATENCY_NS` after both its launch and its
    stream's previous activity waited for something else on the GPU: a stream-wait event the
    trace did not record, or SMs and queue slots held by other streams.  The activity on
    another stream of the device that ended last in that gap is taken as what it waited for.
    """
    # ready: its stream was idle and it was launched (work launched before the step: the step's start)
    ready = pl.coalesce(pl.max_horizontal("_p", "_c"), "w0")
    held = acts.filter((pl.col("cs") - ready) > LAUNCH_LATENCY_NS).select(
        *_WIN, "device", pl.col("stream").alias("_own_stream"), pl.col("event_id").alias("dst_id"), "cs", ready.alias("_p")
    )
    if held.height == 0:
        return pl.DataFrame(schema={**{c: acts.schema[c] for c in _WIN}, "dst_id": pl.Int64, "_x": pl.Int64, "_x_node": pl.Int64, "inferred": pl.Boolean})
    ends = gpu_w.select(*_WIN, "device", "stream", pl.col("ce").alias("_x"), pl.col("n_end").alias("_x_node")).sort("_x")
    # the latest end at or before the start, among other streams: one as-of join per stream of the device
    found = held.join(ends.select(*_WIN, "device", "stream").unique(), on=[*_WIN, "device"]).filter(pl.col("stream") != pl.col("_own_stream"))
    found = found.sort("cs").join_asof(ends, left_on="cs", right_on="_x", by=[*_WIN, "device", "stream"], strategy="backward", check_sortedness=False)
    found = found.filter(pl.col("_x").is_not_null() & (pl.col("_x") > pl.col("_p")))
    return found.select(*_WIN, "dst_id", "_x", "_x_node", pl.lit(True).alias("inferred"))


def _activities(
    gpu_w: pl.DataFrame, host_w: pl.DataFrame, cross: pl.DataFrame, launch_node: Callable[[pl.DataFrame], pl.DataFrame]
) -> pl.DataFrame:
    """What held each activity back: its launch (``_c``, its node from ``launch_node``), the
    previous activity on its stream (``_p``), a cross-stream wait (``_x``); the latest of them
    (``_q``) is tight, the others keep a lower bound.  ``_gpu_bound``: the GPU, not the launch,
    held it."""
    acts = gpu_w.sort([*_STREAM, "cs", "event_id"]).with_columns(
        pl.col("ce").shift(1).over(_STREAM).alias("_p"), pl.col("n_end").shift(1).over(_STREAM).alias("_p_node"),
    )
    calls = host_w.select(*_WIN, pl.col("event_id").alias("call_id"), pl.col("cs").alias("_c"), pl.col("pid").alias("_cpid"), pl.col("tid").alias("_ctid"))
    acts = acts.join(calls, on=[*_WIN, "call_id"], how="left")
    acts = launch_node(acts)
    # a launch recorded after its activity started (clock skew) explains nothing
    acts = acts.with_columns(pl.when(pl.col("_c") <= pl.col("cs")).then(pl.col("_c")).otherwise(None).alias("_c"))
    xs = cross.join(gpu_w.select(*_WIN, pl.col("event_id").alias("src_id"), pl.col("ce").alias("_x"), pl.col("n_end").alias("_x_node")), on="src_id").join(
        gpu_w.select(*_WIN, pl.col("event_id").alias("dst_id"), pl.col("cs").alias("_ds")), on=[*_WIN, "dst_id"]
    ).filter(pl.col("_x") <= pl.col("_ds"))
    xs = pl.concat([xs.select(*_WIN, "dst_id", "_x", "_x_node", "inferred"), _inferred_cross(acts, gpu_w)])
    x_best = xs.sort("_x", descending=True).unique([*_WIN, "dst_id"], keep="first").select(
        *_WIN, pl.col("dst_id").alias("event_id"), "_x", "_x_node", pl.col("inferred").alias("_x_inferred")
    )
    acts = acts.join(x_best, on=[*_WIN, "event_id"], how="left")
    q = pl.max_horizontal("_p", "_x")
    acts = acts.with_columns(q.alias("_q"))
    gpu_side = pl.col("_q").is_not_null() & (pl.col("_c").is_null() | (pl.col("_q") > pl.col("_c")))
    return acts.with_columns(gpu_side.alias("_gpu_bound"))


def _typical_latency(acts: pl.DataFrame) -> pl.DataFrame:
    """rank → median launch latency of activities that waited for their launch (not their stream)."""
    return acts.filter(~pl.col("_gpu_bound") & pl.col("_c").is_not_null()).group_by("rank").agg(
        (pl.col("cs") - pl.col("_c")).median().cast(pl.Int64).alias("_lat")
    )


def _last_launched_before(queries: pl.DataFrame, acts: pl.DataFrame, by: list[str], at: str) -> pl.DataFrame:
    """For each query row, the activity (``src_id``, ``g_end``) launched last strictly before ``at`` in its group."""
    right = acts.select(*by, pl.col("launch_t").alias("_lt"), pl.col("event_id").alias("src_id"), pl.col("end_ns").alias("g_end")).sort("_lt", "g_end")
    left = queries.with_columns((pl.col(at) - 1).alias("_before")).sort("_before")
    return left.join_asof(right, left_on="_before", right_on="_lt", by=by, strategy="backward", check_sortedness=False).drop("_before", "_lt")


def _last_retired(queries: pl.DataFrame, acts: pl.DataFrame) -> pl.DataFrame:
    """For each query (a call [c0, c1] on a stream), the work launched before c0 that finished
    last by c1: the completion that freed the queue slot it waited for."""
    by = ["rank", "device", "stream"]
    right = acts.select(*by, pl.col("end_ns").alias("g_end"), pl.col("event_id").alias("src_id"), pl.col("launch_t").alias("_lt")).sort("g_end")
    j = queries.sort("c1").join_asof(right, left_on="c1", right_on="g_end", by=by, strategy="backward", check_sortedness=False)
    return j.filter(pl.col("_lt") < pl.col("c0")).drop("_lt")


def _sync_sources(events: pl.DataFrame, links: pl.DataFrame, host: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    """Every blocking host call and the GPU activity whose completion it waited for.

    Returns call_id, rank, src_id, g_end, tag (``sync`` or ``pageable_memcpy``), inferred.
    Explicit sync rows (linked to their call, or standing alone on a host thread) give the
    stream, the device or the recorded event waited on; without them the scope is every
    stream of the rank and the source is the work that finished last before the call
    returned (inferred).  A copy call that returns only after its own copy ended waited for
    that copy.
    """
    schema = {"call_id": pl.Int64, "rank": pl.Int32, "src_id": pl.Int64, "g_end": pl.Int64, "tag": pl.String, "inferred": pl.Boolean}
    if gpu.height == 0 or host.height == 0:
        return pl.DataFrame(schema=schema)
    name = pl.col("name")
    api = host.filter(pl.col("kind").is_in(LAUNCH_KINDS))
    rows = events.filter(is_host_wait_row()).select(
        pl.col("event_id").alias("_row"), pl.col("sync_kind").cast(pl.String).alias("_skind"), pl.col("device").alias("_sdev"),
        pl.col("stream").alias("_sstream"), pl.col("wait_stream").alias("_swait"), pl.col("wait_event_correlation").alias("_scorr"),
    )
    row_of_call = links.join(rows, left_on="gpu_event_id", right_on="_row").unique("launch_event_id", keep="first").rename(
        {"launch_event_id": "call_id"}
    ).drop("gpu_event_id", "correlation", "link_source")
    by_name = api.filter(is_blocking_call()).select(
        pl.col("event_id").alias("call_id"), "rank", "pid", "tid", pl.col("start_ns").alias("c0"), pl.col("end_ns").alias("c1"),
        name.str.contains("(?i)DeviceSynchronize|CtxSynchronize|ThreadSynchronize").alias("_context"),
    )
    calls = by_name.join(row_of_call, on="call_id", how="left")
    orphan = host.filter(pl.col("kind") == EventKind.SYNC.value).join(rows, left_on="event_id", right_on="_row").select(
        pl.col("event_id").alias("call_id"), "rank", "pid", "tid", pl.col("start_ns").alias("c0"), pl.col("end_ns").alias("c1"),
        pl.lit(False).alias("_context"), "_skind", "_sdev", "_sstream", "_swait", "_scorr",
    )
    calls = pl.concat([calls, orphan], how="diagonal_relaxed").with_columns(pl.col("_skind").is_not_null().alias("_explicit"))

    streams = gpu.select("rank", "device", "stream").unique()
    # stream- and device-scoped waits: the last work launched before the call on each stream in scope
    scoped = calls.filter(~((pl.col("_skind") == "event_sync") & pl.col("_scorr").is_not_null())).join(streams, on="rank")
    stream_known = (pl.col("_skind") == "stream_sync") & pl.col("_sstream").is_not_null()
    device_known = pl.col("_skind").is_in(["stream_sync", "context_sync"]) & pl.col("_sdev").is_not_null()
    scoped = scoped.filter(
        (~stream_known | (pl.col("stream") == pl.col("_sstream"))) & (~device_known | (pl.col("device") == pl.col("_sdev")))
    )
    cand = [_last_launched_before(scoped, gpu, ["rank", "device", "stream"], "c0").select("call_id", "src_id", "g_end", "_explicit")]

    # event waits: the work launched on the recorded stream before the cudaEventRecord
    ev = calls.filter((pl.col("_skind") == "event_sync") & pl.col("_scorr").is_not_null())
    if ev.height:
        records = api.select(pl.col("correlation").alias("_scorr"), "rank", pl.col("start_ns").alias("_rec"), pl.col("pid").alias("_rpid"), pl.col("tid").alias("_rtid"))
        ev = ev.join(records.unique(["rank", "_scorr"], keep="first"), on=["rank", "_scorr"], how="inner")
        rs_known = pl.col("_swait").is_not_null() & (pl.col("_sstream").is_null() | (pl.col("_swait") != pl.col("_sstream")))
        known = ev.filter(rs_known).with_columns(pl.col("_sdev").alias("device"), pl.col("_swait").alias("stream"))
        cand.append(_last_launched_before(known, gpu, ["rank", "device", "stream"], "_rec").select("call_id", "src_id", "g_end", "_explicit"))
        unknown = ev.filter(~rs_known).with_columns(pl.col("_rpid").alias("call_pid"), pl.col("_rtid").alias("call_tid"))
        cand.append(
            _last_launched_before(unknown, gpu.filter(pl.col("call_pid").is_not_null()), ["call_pid", "call_tid"], "_rec")
            .select("call_id", "src_id", "g_end", pl.lit(False).alias("_explicit"))
        )
    # a launch call blocked on a full queue: it returned when earlier work on its device retired
    queued = _queue_blocked(api, gpu)
    if queued.height:
        cand.append(_last_retired(queued.join(streams, on=["rank", "device"]), gpu).select("call_id", "src_id", "g_end", pl.lit(False).alias("_explicit")))
        calls = pl.concat([calls, queued.drop("device").with_columns(pl.lit(True).alias("_queue"))], how="diagonal_relaxed")
    # a copy call that blocked until its own copy was done
    own = gpu.filter(pl.col("call_id").is_not_null() & pl.col("tag").is_in(["memcpy", "pageable_memcpy"])).join(
        api.select(pl.col("event_id").alias("call_id"), pl.col("start_ns").alias("c0"), pl.col("end_ns").alias("c1"), "pid", "tid", name.alias("_cname")),
        on="call_id",
    ).filter((pl.col("end_ns") > pl.col("c0")) & (pl.col("end_ns") <= pl.col("c1")) & pl.col("_cname").str.contains(patterns.MEMCPY_API))
    own_calls = own.select("call_id", pl.col("rank"), "pid", "tid", "c0", "c1").unique("call_id")
    calls = pl.concat([calls, own_calls.join(calls.select("call_id"), on="call_id", how="anti")], how="diagonal_relaxed").with_columns(
        pl.col("_explicit").fill_null(False)
    )
    cand.append(own.select("call_id", pl.col("event_id").alias("src_id"), pl.col("end_ns").alias("g_end"), pl.lit(False).alias("_explicit")))
    cands = pl.concat(cand, how="diagonal_relaxed").filter(pl.col("src_id").is_not_null())
    cands = cands.join(calls.select("call_id", "rank", "c1", pl.col("_explicit").alias("_call_explicit")).unique("call_id"), on="call_id")
    cands = cands.filter(pl.col("g_end") <= pl.col("c1")).sort("g_end", descending=True).unique("call_id", keep="first")
    own_pageable = own.filter(pl.col("tag") == "pageable_memcpy").select("call_id", pl.col("event_id").alias("src_id")).with_columns(pl.lit(True).alias("_pg"))
    cands = cands.join(own_pageable, on=["call_id", "src_id"], how="left")
    queue_ids = calls.filter(pl.col("_queue").fill_null(False)).select("call_id", pl.lit(True).alias("_q")) if "_queue" in calls.columns else None
    cands = cands.join(queue_ids, on="call_id", how="left") if queue_ids is not None else cands.with_columns(pl.lit(None, dtype=pl.Boolean).alias("_q"))
    return cands.select(
        "call_id", pl.col("rank").cast(pl.Int32), "src_id", "g_end",
        pl.when(pl.col("_pg").fill_null(False)).then(pl.lit("pageable_memcpy"))
        .when(pl.col("_q").fill_null(False)).then(pl.lit("launch")).otherwise(pl.lit("sync")).alias("tag"),
        (~(pl.col("_explicit").fill_null(False) | pl.col("_call_explicit").fill_null(False))).alias("inferred"),
    ).cast(schema)  # type: ignore[arg-type]


def _queue_blocked(api: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    """Launch calls that waited on a full launch queue (call_id, rank, pid, tid, c0, c1, device).

    The queue's depth when a call starts is the number of activities of the device launched
    before it that had not started yet: two sorted counts, joined as of the call's start.
    """
    name = pl.col("name")
    calls = api.filter(
        ((pl.col("end_ns") - pl.col("start_ns")) >= QUEUE_WAIT_NS)
        & (name.str.contains(patterns.LAUNCH_API) | name.str.contains(patterns.MEMCPY_API) | name.str.contains(r"(?i)memset"))
    ).select(pl.col("event_id").alias("call_id"), "rank", "pid", "tid", pl.col("start_ns").alias("c0"), pl.col("end_ns").alias("c1"))
    if calls.height == 0:
        return calls.with_columns(pl.lit(None, dtype=pl.Int32).alias("device"))
    own_device = gpu.filter(pl.col("call_id").is_not_null()).unique("call_id", keep="first").select("call_id", pl.col("device").alias("_own"))
    # the device of the work it launched, or (when that work fell outside the capture) every device of its rank
    calls = calls.join(own_device, on="call_id", how="left").join(gpu.select("rank", "device").unique(), on="rank")
    calls = calls.filter(pl.col("_own").is_null() | (pl.col("_own") == pl.col("device"))).drop("_own")
    if calls.height == 0:
        return calls
    key = ["rank", "device"]
    by_launch = gpu.select(*key, pl.col("launch_t").alias("_t")).sort("_t").with_columns(pl.int_range(1, pl.len() + 1).over(key).alias("_n_launched"))
    by_start = gpu.select(*key, pl.col("start_ns").alias("_t")).sort("_t").with_columns(pl.int_range(1, pl.len() + 1).over(key).alias("_n_started"))
    q = calls.with_columns((pl.col("c0") - 1).alias("_before")).sort("_before").join_asof(
        by_launch, left_on="_before", right_on="_t", by=key, strategy="backward", check_sortedness=False
    ).drop("_t").sort("c0").join_asof(by_start, left_on="c0", right_on="_t", by=key, strategy="backward", check_sortedness=False)
    depth = pl.col("_n_launched").fill_null(0) - pl.col("_n_started").fill_null(0)
    return q.filter(depth >= QUEUE_DEPTH).select("call_id", "rank", "pid", "tid", "c0", "c1", "device")


def _cross_stream(events: pl.DataFrame, links: pl.DataFrame, host: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    """GPU → GPU waits of ``cudaStreamWaitEvent``: src_id (recorded work) → dst_id (held-back work)."""
    schema = {"src_id": pl.Int64, "dst_id": pl.Int64, "inferred": pl.Boolean}
    waits = events.filter((pl.col("kind") == EventKind.SYNC.value) & (pl.col("sync_kind") == "stream_wait_event") & pl.col("stream").is_not_null())
    if waits.height == 0 or gpu.height == 0:
        return pl.DataFrame(schema=schema)
    api = host.filter(pl.col("kind").is_in(LAUNCH_KINDS))
    call_of = links.select(pl.col("gpu_event_id").alias("event_id"), pl.col("launch_event_id").alias("_call")).unique("event_id")
    waits = waits.select("event_id", "rank", "device", "stream", "wait_stream", "wait_event_correlation", "pid", "tid", "start_ns").join(
        call_of, on="event_id", how="left"
    )
    waits = waits.join(api.select(pl.col("event_id").alias("_call"), pl.col("start_ns").alias("_cs"), pl.col("pid").alias("_cpid"), pl.col("tid").alias("_ctid")), on="_call", how="left")
    waits = waits.with_columns(
        pl.coalesce("_cs", "start_ns").alias("_wt"), pl.coalesce("_cpid", "pid").alias("_wpid"), pl.coalesce("_ctid", "tid").alias("_wtid")
    )
    records = api.filter(pl.col("name").str.contains(r"(?i)EventRecord"))
    by_corr = records.select("rank", pl.col("correlation").alias("wait_event_correlation"), pl.col("start_ns").alias("_rec"), pl.col("pid").alias("_rpid"), pl.col("tid").alias("_rtid")).unique(
        ["rank", "wait_event_correlation"], keep="first"
    )
    waits = waits.join(by_corr, on=["rank", "wait_event_correlation"], how="left")
    # no recorded correlation: the event record issued last on the same thread before the wait
    prior = records.select(pl.col("pid").alias("_wpid"), pl.col("tid").alias("_wtid"), pl.col("start_ns").alias("_prec")).sort("_prec")
    waits = waits.sort("_wt").join_asof(prior, left_on="_wt", right_on="_prec", by=["_wpid", "_wtid"], strategy="backward", check_sortedness=False)
    waits = waits.with_columns(
        pl.col("_rec").is_null().alias("_rec_inferred"),
        pl.coalesce("_rec", "_prec").alias("_rec"), pl.coalesce("_rpid", "_wpid").alias("_rpid"), pl.coalesce("_rtid", "_wtid").alias("_rtid"),
    ).filter(pl.col("_rec").is_not_null())
    rs_known = pl.col("wait_stream").is_not_null() & (pl.col("wait_stream") != pl.col("stream"))
    known = waits.filter(rs_known).with_columns(pl.col("stream").alias("_wait_on"), pl.col("wait_stream").alias("stream"))
    src_known = _last_launched_before(known, gpu, ["rank", "device", "stream"], "_rec").with_columns(pl.col("_wait_on").alias("stream"))
    unknown = waits.filter(~rs_known).with_columns(pl.col("_rpid").alias("call_pid"), pl.col("_rtid").alias("call_tid"))
    src_unknown = _last_launched_before(unknown, gpu.filter(pl.col("call_pid").is_not_null()), ["call_pid", "call_tid"], "_rec").with_columns(
        pl.lit(True).alias("_rec_inferred")
    )
    src = pl.concat([src_known.select("rank", "device", "stream", "_wt", "src_id", "_rec_inferred"), src_unknown.select("rank", "device", "stream", "_wt", "src_id", "_rec_inferred")])
    src = src.filter(pl.col("src_id").is_not_null())
    # the held-back work: the first activity launched on the waiting stream after the wait call
    right = gpu.select("rank", "device", "stream", pl.col("launch_t").alias("_lt"), pl.col("event_id").alias("dst_id")).sort("_lt")
    dst = src.sort("_wt").join_asof(right, left_on="_wt", right_on="_lt", by=["rank", "device", "stream"], strategy="forward", check_sortedness=False)
    dst = dst.filter(pl.col("dst_id").is_not_null() & (pl.col("dst_id") != pl.col("src_id")))
    return dst.select("src_id", "dst_id", pl.col("_rec_inferred").alias("inferred")).cast(schema)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# the path


def _longest_paths(windows: pl.DataFrame, compact: pl.DataFrame, runs: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    pairs, stats = _paths(compact)
    syncs = compact.filter(pl.col("kind") == EdgeKind.SYNC.value).group_by(_WIN).agg(
        pl.len().cast(pl.Int64).alias("sync_edges"), pl.col("inferred").sum().cast(pl.Int64).alias("inferred_sync_edges")
    )
    zero = ["path_ns", "nodes", "edges", "sync_edges", "inferred_sync_edges", "cycles_broken"]
    steps = windows.sort(_WIN).join(stats, on=_WIN, how="left", maintain_order="left").join(
        syncs, on=_WIN, how="left", maintain_order="left"
    ).with_columns(
        (pl.col("end_ns") - pl.col("start_ns")).alias("wall_ns"),
        # a step without edges has no graph: no path, and none of its counts
        *[pl.when(pl.col("edges").is_null()).then(0).otherwise(pl.col(c).fill_null(0)).alias(c) for c in zero],
    ).select(list(STEP_SCHEMA)).cast(STEP_SCHEMA)  # type: ignore[arg-type]
    if pairs.height == 0:
        return pl.DataFrame(schema=SEGMENT_SCHEMA), steps
    path_edges = pairs.join(compact.drop(*_WIN), on=["src", "dst"], how="left", maintain_order="left").select("seq", *EDGE_SCHEMA, "run").with_columns(
        pl.col("seq").cast(pl.Int64), *[pl.col(c).cast(pl.String) for c in _COMPACT_DTYPES]
    )
    # a contracted run of a thread's stretches stands for its stretches, in time order
    single = path_edges.filter(pl.col("run").is_null()).with_columns(pl.lit(0, dtype=pl.Int64).alias("_sub")).drop("run")
    expanded = path_edges.filter(pl.col("run").is_not_null()).select("seq", "run").join(runs, on="run").with_columns(
        pl.col("start_ns").rank("ordinal").over("seq").cast(pl.Int64).alias("_sub")
    ).drop("run")
    seg = pl.concat([single, expanded.select(single.columns)], how="vertical_relaxed")
    seg = seg.filter(pl.col("w") != 0).sort([*_WIN, "seq", "_sub"]).with_columns(
        pl.int_range(pl.len()).over(_WIN).cast(pl.Int64).alias("seq"),
        pl.col("tag").replace_strict(TAG_CAUSE, return_dtype=CAUSE_DTYPE).alias("cause"),
    )
    seg = seg.select(
        "rank", "step", "seq", "start_ns", "end_ns", pl.col("w").alias("dur_ns"),
        pl.coalesce("track", pl.format("cpu {}/{}", "pid", "tid")).alias("track"), "event_id",
        pl.col("kind").alias("edge_kind"), "cause", "inferred",
    )
    return seg.cast(SEGMENT_SCHEMA), steps  # type: ignore[arg-type]


def _paths(compact: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Every step's longest path as consecutive node pairs (rank, step, seq, src, dst), and
    its length and size (rank, step, path_ns, nodes, edges, cycles_broken); ``compact`` is
    sorted by step, then in the order the edges enter the step's graph."""
    pair_schema = {"rank": pl.Int32, "step": pl.Int64, "seq": pl.UInt32, "src": pl.Int64, "dst": pl.Int64}
    stat_schema = {"rank": pl.Int32, "step": pl.Int64, "path_ns": pl.Int64, "nodes": pl.Int64, "edges": pl.Int64, "cycles_broken": pl.Int64}
    sizes = compact.group_by(_WIN, maintain_order=True).len().cast({"len": pl.Int64})
    pair_parts: list[pl.DataFrame] = []
    stat_parts: list[pl.DataFrame] = []
    left = sizes
    native = _native_dag()
    if native is not None and sizes.height and _native_ok(compact, ["w"]):
        lengths, nodes, status, path, path_off = native.longest_paths(
            _int64(compact["src"]), _int64(compact["dst"]), [_int64(compact["w"])], _offsets(sizes["len"]), True
        )
        counts = pl.Series(list(memoryview(path_off).cast("q")), dtype=pl.Int64).diff().slice(1)
        solved = sizes.with_columns(
            pl.Series("path_ns", list(memoryview(lengths).cast("q")), dtype=pl.Int64),
            pl.Series("nodes", list(memoryview(nodes).cast("q")), dtype=pl.Int64),
            pl.Series("_status", list(memoryview(status).cast("q")), dtype=pl.Int64),
            counts.alias("_n"),
        )
        # the path's nodes, each with its step; a pair is a node and the next one of its step
        ids = pl.Series("src", memoryview(path).cast("q").tolist(), dtype=pl.Int64)
        walk = solved.select(*_WIN, pl.col("_n")).with_columns(pl.int_ranges("_n").alias("seq")).explode("seq").drop_nulls("seq")
        walk = walk.with_columns(ids, pl.col("seq").cast(pl.UInt32)).with_columns(pl.col("src").shift(-1).alias("dst"))
        pair_parts.append(walk.filter(pl.col("seq") < pl.col("_n") - 1).select(list(pair_schema)))
        stat_parts.append(
            solved.filter(pl.col("_status") == _DAG_OK).select(
                *_WIN, "path_ns", "nodes", pl.col("len").alias("edges"), pl.lit(0, dtype=pl.Int64).alias("cycles_broken")
            )
        )
        left = solved.filter(pl.col("_status") != _DAG_OK).select(*_WIN, "len")
    if left.height:
        starts = sizes.with_columns((pl.col("len").cum_sum() - pl.col("len")).alias("_at")).join(left.select(_WIN), on=_WIN, how="semi")
        rows = []
        for rank, step, n, at in starts.iter_rows():
            G = nx.DiGraph()
            G.add_weighted_edges_from(compact.slice(at, n).select("src", "dst", "w").iter_rows(), weight="w")
            topo, broken = _topological(G)
            path = nx.dag_longest_path(G, weight="w", topo_order=topo)
            pair_parts.append(
                pl.DataFrame({"src": path[:-1], "dst": path[1:]}, schema={"src": pl.Int64, "dst": pl.Int64}).with_row_index("seq").select(
                    pl.lit(rank, dtype=pl.Int32).alias("rank"), pl.lit(step, dtype=pl.Int64).alias("step"), "seq", "src", "dst"
                )
            )
            rows.append((rank, step, _path_length(G, path, "w"), G.number_of_nodes(), G.number_of_edges(), broken))
        stat_parts.append(pl.DataFrame(rows, schema=stat_schema, orient="row"))
    pairs = pl.concat([p.cast(pair_schema) for p in pair_parts]) if pair_parts else pl.DataFrame(schema=pair_schema)  # type: ignore[arg-type]
    stats = pl.concat([p.cast(stat_schema) for p in stat_parts]) if stat_parts else pl.DataFrame(schema=stat_schema)  # type: ignore[arg-type]
    return pairs, stats


def _topological(G: nx.DiGraph) -> tuple[list[int], int]:
    """A topological order of ``G`` and how many edges had to go to make it acyclic.

    The graph is acyclic by construction (every edge follows the recorded order of events);
    inconsistent clocks could still close a loop, and then the lightest edge of each cycle
    is dropped until none is left.
    """
    broken = 0
    while True:
        try:
            return list(nx.topological_sort(G)), broken
        except nx.NetworkXUnfeasible:
            cycle = nx.find_cycle(G)
            u, v = min(cycle, key=lambda e: G.edges[e[0], e[1]]["w"])[:2]
            G.remove_edge(u, v)
            broken += 1


def _contract(edges: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(contracted edges, the thread stretches of every run).

    An instant of a thread that nothing but its own thread touches has one edge in and one
    out; every path through it takes both, so the run of stretches between two instants that
    other edges reference becomes one edge.  Its weight is split by tag (``w_<tag>``) so a
    what-if can still scale each part.
    """
    is_chain = pl.col("kind").is_in([EdgeKind.CPU.value, EdgeKind.DATA_LOADING.value])
    chain = edges.filter(is_chain)
    other = edges.filter(~is_chain)
    junction = pl.concat([other.select(pl.col("src").alias("n")), other.select(pl.col("dst").alias("n"))]).unique()
    keys = ["rank", "step", "pid", "tid"]
    chain = chain.sort([*keys, "start_ns"]).with_columns(pl.col("src").is_in(junction["n"].implode()).alias("_j"))
    starts_run = pl.col("_j") | (pl.col("src") != pl.col("dst").shift(1).over(keys)).fill_null(True)
    chain = chain.with_columns(starts_run.cast(pl.Int64).cum_sum().alias("run"))
    per_tag = [pl.when(pl.col("tag") == t).then(pl.col("w")).otherwise(0).sum().alias(f"w_{t}") for t in TAGS]
    runs = chain.group_by("run", maintain_order=True).agg(
        pl.col("rank").first(), pl.col("step").first(), pl.col("src").first(), pl.col("dst").last(), pl.col("w").sum(),
        pl.when((pl.col("kind") == EdgeKind.DATA_LOADING.value).all()).then(pl.lit(EdgeKind.DATA_LOADING.value))
        .otherwise(pl.lit(EdgeKind.CPU.value)).alias("kind"),
        pl.when(pl.col("tag").n_unique() == 1).then(pl.col("tag").first()).otherwise(pl.lit("cpu")).alias("tag"),
        pl.lit(False).alias("removable"), pl.col("inferred").any(),
        pl.when(pl.len() == 1).then(pl.col("event_id").first()).otherwise(None).alias("event_id"),
        pl.col("track").first(), pl.col("pid").first(), pl.col("tid").first(), pl.col("start_ns").first(), pl.col("end_ns").last(), *per_tag,
    )
    singles = other.with_columns(
        pl.lit(None, dtype=pl.Int64).alias("run"),
        *[pl.when(pl.col("tag") == t).then(pl.col("w")).otherwise(0).alias(f"w_{t}") for t in TAGS],
    )
    cols = [*EDGE_SCHEMA, "run", *[f"w_{t}" for t in TAGS]]
    compact = pl.concat([singles.select(cols), runs.select(cols)], how="vertical_relaxed")
    members = chain.select("run", *EDGE_SCHEMA)

    # the same on a stream: an activity whose end leads only to the next activity on its
    # stream becomes one edge with the gap after it
    only_out = compact.group_by("src").len().filter(pl.col("len") == 1).select(pl.col("src").alias("dst"))
    gpu = compact.filter(pl.col("kind") == EdgeKind.GPU.value).join(only_out, on="dst", how="semi")
    pairs = gpu.join(compact.filter(pl.col("kind") == EdgeKind.STREAM.value), left_on="dst", right_on="src", suffix="_s")
    if pairs.height:
        first = int(compact["run"].max() or 0) + 1  # type: ignore[arg-type]
        pairs = pairs.with_columns((pl.int_range(pl.len()) + first).cast(pl.Int64).alias("run"))
        merged = pairs.select(
            "rank", "step", "src", pl.col("dst_s").alias("dst"), (pl.col("w") + pl.col("w_s")).alias("w"), "kind", "tag",
            "removable", "inferred", "event_id", "track", "pid", "tid", "start_ns", pl.col("end_ns_s").alias("end_ns"), "run",
            *[(pl.col(f"w_{t}") + pl.col(f"w_{t}_s")).alias(f"w_{t}") for t in TAGS],
        )
        fine = pl.concat([
            pairs.select("run", *EDGE_SCHEMA, pl.col("w_" + "kernel").alias("_drop")).drop("_drop"),
            pairs.select("run", *[pl.col(f"{c}_s").alias(c) if f"{c}_s" in pairs.columns else pl.col(c) for c in EDGE_SCHEMA]),
        ])
        gone = pl.concat([pairs.select("src", "dst"), pairs.select(pl.col("dst").alias("src"), pl.col("dst_s").alias("dst"))])
        compact = pl.concat([compact.join(gone, on=["src", "dst"], how="anti"), merged.select(cols)], how="vertical_relaxed")
        members = pl.concat([members, fine.select(members.columns).cast(members.schema)])
    compact = compact.with_columns(pl.col("kind").replace_strict(_PRIORITY, return_dtype=pl.Int32).alias("_prio")).sort(
        ["rank", "step", "_prio", "dst", "src"]
    ).drop("_prio")
    return compact.cast(_COMPACT_DTYPES), members  # type: ignore[arg-type]


def _path_length(G: nx.DiGraph, path: Sequence[int], weight: str) -> int:
    return int(sum(G.edges[u, v][weight] for u, v in itertools.pairwise(path)))


def _breakdown(segments: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    if segments.height == 0:
        return pl.DataFrame(schema=BREAKDOWN_SCHEMA)
    b = segments.select(*_WIN, "cause", "dur_ns").group_by(*_WIN, "cause").agg(pl.col("dur_ns").sum().alias("ns"))
    b = b.with_columns(pl.col("cause").cast(pl.String))
    b = b.join(steps.select(*_WIN, "path_ns"), on=_WIN).with_columns(
        (pl.col("ns") / pl.when(pl.col("path_ns") > 0).then(pl.col("path_ns")).otherwise(None)).fill_null(0.0).alias("share")
    )
    order = {c: i for i, c in enumerate(CP_CAUSES)}
    b = b.with_columns(pl.col("cause").replace_strict(order, default=len(order), return_dtype=pl.Int32).alias("_o"))
    return b.sort([*_WIN, "_o"]).select(list(BREAKDOWN_SCHEMA)).cast(BREAKDOWN_SCHEMA)  # type: ignore[arg-type]


def _result(what_if: WhatIf, per_step: pl.DataFrame) -> WhatIfResult:
    complete = per_step.filter(pl.col("complete") & pl.col("predicted_step_ns").is_not_null())
    if complete.height == 0:
        complete = per_step.filter(pl.col("predicted_step_ns").is_not_null())
    base = complete["wall_ns"].mean() if complete.height else None
    pred = complete["predicted_step_ns"].mean() if complete.height else None
    return WhatIfResult(
        what_if=what_if,
        per_step=per_step,
        baseline_step_ms=None if base is None else float(base) / 1e6,  # type: ignore[arg-type]
        predicted_step_ms=None if pred is None else float(pred) / 1e6,  # type: ignore[arg-type]
    )


def _notes(events: pl.DataFrame, steps: pl.DataFrame) -> Iterable[str]:
    if steps.height == 0:
        return
    if int(steps["inferred_sync_edges"].sum() or 0):
        yield (
            "Critical path: some host-device sync dependencies were inferred from blocking API calls and their timing "
            "(no explicit sync rows for them); enable cuda_sync events (Kineto) or nsys --trace=cuda for exact ones."
        )
    short = steps.filter((pl.col("wall_ns") > 0) & (pl.col("path_ns") < pl.col("wall_ns") * 0.99))
    if short.height:
        yield (
            f"Critical path: in {short.height} step(s) the path explains less than 99% of the step time "
            "(work on threads or streams whose dependencies the trace does not record)."
        )
    if int(steps["cycles_broken"].sum() or 0):
        yield "Critical path: inconsistent timestamps created dependency cycles; the weakest edges were dropped."
    del events
