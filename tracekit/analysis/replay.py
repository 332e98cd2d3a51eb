"""Replay the steady state of a trace, and price every fix by replaying the edited program.

The critical path (:mod:`.critical_path`) explains one step at a time.  A fix changes more
than one step: without a sync the host loads the next batch while the GPU still computes the
current one.  The replay therefore takes the dependency graph of a *group of consecutive
steps* (up to :data:`GROUP_STEPS` of one rank at a time; every step of a long trace, in
groups) and simulates it:

* host threads run their intervals in program order (operators, runtime calls and the
  unrecorded time between them, which is host work);
* a launch reaches its stream after the launch latency; a stream runs its work in FIFO order;
  cross-stream event waits hold work back;
* a blocking call (sync APIs, ``cuda_sync`` rows, data-dependent operators, blocking pageable
  copies) has a GPU → host edge: the host resumes when the GPU work it waited for ends, plus
  the call's own cost after it.  The recorded duration of such a call is never replayed: the
  wait is derived from the graph.

The graph is the one :func:`.critical_path.build_graph` builds (the same threads, sync
sources, cross-stream waits and launch latency), over a window spanning the group.  Every
instant's replayed time is its longest distance from the window's start (a topological
sweep).  A step ends when the host starts the next step and the GPU finished the work the step
launched, whichever is later; replaying the graph unchanged reproduces the measured steps,
and :attr:`Replay.error` says how closely.

A fix edits the graph the way the real fix edits the program (each finding kind's
:attr:`~tracekit.analysis.causes.FindingKind.replay` in the cause registry; its sentences are
:data:`FIX_MODELS`), the edited graph is replayed, and the fix's saving is the drop of the
median replayed step.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import polars as pl

from ..schema import EventKind
from .causes import FIX_MODELS, WHAT_IF_CAUSES, Edit, GraphCapture, SpanRule, base_rules, fix_edit, interval_columns
from .critical_path import EdgeKind, build_graph
from .critical_path.longest import acyclic_order
from .sweep import longest, native_available, topological
from .whatif import WhatIf

#: steps of one rank replayed together (a fix can move work across step boundaries)
GROUP_STEPS = 12
#: groups replayed side by side (threads: the graph builder's polars queries and the native
#: sweeps release the GIL)
REPLAY_THREADS = 2
#: host→device bandwidth from pinned memory (bytes/ns = GB/s) when the trace has no pinned copy
PINNED_BW = 24.0
#: host memory-copy bandwidth (GB/s): pinning a batch on the main thread costs bytes / this
HOST_COPY_BW = 10.0
#: the gap between back-to-back activities on a stream, when the trace shows none (ns)
STREAM_GAP_NS = 2_000
#: a copy this small says nothing about the link's bandwidth
_BW_MIN_BYTES = 1 << 20
#: the host events a collapse rule's intervals hold, and the graph's edges of host stretches
_HOST_KINDS = [EventKind.ANNOTATION.value, EventKind.CPU_OP.value, EventKind.RUNTIME.value, EventKind.DRIVER.value, EventKind.SYNC.value]
_HOST_EDGE_KINDS = [EdgeKind.CPU.value, EdgeKind.DATA_LOADING.value]

def what_if_edit(what_if: WhatIf) -> Edit:
    """A ``--what-if CAUSE=FACTOR`` question as a graph edit: the cause's tags are scaled on the
    host and the GPU alike; factor 0 removes the removable waits (GPU → host sync edges) its
    tags carry, as on the critical path."""
    factors: dict[str, float] = {}
    drop: set[str] = set()
    for name, factor in what_if.factors:
        for tag in WHAT_IF_CAUSES[name]:
            factors[tag] = factor
            if factor == 0.0:
                drop.add(tag)
    return Edit(what_if.label, host=dict(factors), gpu=dict(factors), drop_sync=frozenset(drop))


@dataclass(frozen=True)
class Replay:
    """The replayed steps of a trace, unchanged and under each edit."""

    #: rank, step, steady (not the first step of its group), measured_ns (the steps table's
    #: duration), recorded_ns (the recorded trace's step under the replay's definition: until
    #: the host starts the next step and the GPU finished this step's work), replayed_ns, and
    #: one ``<label>_ns`` column per edit
    steps: pl.DataFrame
    #: the edits replayed, in order
    edits: tuple[Edit, ...]
    #: the GPU activities' summed durations over the replayed groups, unchanged (``replayed``)
    #: and under each edit (its label), ns
    gpu_busy_ns: dict[str, int] = field(default_factory=dict)

    def gpu_busy_ratio(self, label: str) -> float | None:
        """The GPU's busy time under the edit as a share of its busy time unchanged."""
        base, edited = self.gpu_busy_ns.get("replayed"), self.gpu_busy_ns.get(label)
        return None if not base or edited is None else edited / base

    @property
    def measured_step_ms(self) -> float | None:
        return _median_ms(self.steps, "measured_ns")

    @property
    def replayed_step_ms(self) -> float | None:
        return _median_ms(self.steps, "replayed_ns")

    @property
    def recorded_step_ms(self) -> float | None:
        return _median_ms(self.steps, "recorded_ns")

    @property
    def error(self) -> float | None:
        """|median replayed step − median recorded step| / median recorded step (the same
        definition of a step on both sides; see :attr:`steps`)."""
        m, r = self.recorded_step_ms, self.replayed_step_ms
        if m is None or r is None or m <= 0:
            return None
        return abs(r - m) / m

    def delta_ms(self, label: str) -> float | None:
        """The drop of the median replayed step under the edit (negative: slower)."""
        base, fixed = self.replayed_step_ms, _median_ms(self.steps, f"{label}_ns")
        if base is None or fixed is None:
            return None
        return base - fixed

    def saving_ms(self, label: str) -> float | None:
        """What the edit saves per step: the drop of the median replayed step (never negative)."""
        delta = self.delta_ms(label)
        return None if delta is None else max(0.0, delta)

    def mean_steady_ms(self, col: str) -> float | None:
        """The mean of a step column over the steady steps (ms)."""
        if col not in self.steps.columns:
            return None
        v = self.steps.filter(pl.col("steady"))[col].drop_nulls()
        return None if v.len() == 0 else float(v.mean()) / 1e6  # type: ignore[arg-type]

    def _steady_pair(self, label: str) -> pl.DataFrame | None:
        col = f"{label}_ns"
        if col not in self.steps.columns:
            return None
        rows = self.steps.filter(pl.col("steady")).drop_nulls(["replayed_ns", col])
        if rows.height == 0:
            rows = self.steps.drop_nulls(["replayed_ns", col])
        return rows if rows.height else None

    def mean_saving_ms(self, label: str) -> float | None:
        """What the edit saves per step on average over the steady steps (never negative):
        unlike the median, this sees stalls that hit only some steps (a DataLoader that falls
        behind every k-th batch, a collector pause)."""
        rows = self._steady_pair(label)
        if rows is None:
            return None
        return max(0.0, float(rows["replayed_ns"].sum()) - float(rows[f"{label}_ns"].sum())) / rows.height / 1e6

    def mean_saving_share(self, label: str) -> float | None:
        """:meth:`mean_saving_ms` as a share of the mean steady-state step."""
        rows = self._steady_pair(label)
        if rows is None:
            return None
        base = float(rows["replayed_ns"].sum())
        return None if base <= 0 else max(0.0, base - float(rows[f"{label}_ns"].sum())) / base

    def predicted_step_ms(self, label: str) -> float | None:
        """The measured median step once the edit is made: minus its saving, or plus its cost
        where the fix makes the step slower (pinning on the main thread, for one)."""
        m, d = self.measured_step_ms, self.delta_ms(label)
        return None if m is None or d is None else m - d


def _median_ms(steps: pl.DataFrame, col: str) -> float | None:
    if col not in steps.columns:
        return None
    v = steps.filter(pl.col("steady"))[col].drop_nulls()
    if v.len() == 0:
        v = steps[col].drop_nulls()
    return None if v.len() == 0 else float(v.median()) / 1e6  # type: ignore[arg-type]


_STEP_SCHEMA = {
    "rank": pl.Int32, "step": pl.Int64, "steady": pl.Boolean, "measured_ns": pl.Int64, "recorded_ns": pl.Int64, "replayed_ns": pl.Int64,
}


def replay(
    events: pl.DataFrame, links: pl.DataFrame, steps: pl.DataFrame, edits: Sequence[Edit] = (), *, group_steps: int = GROUP_STEPS
) -> Replay:
    """Replay the complete steps of every rank, unchanged and under each of ``edits``.

    ``steps`` is :func:`.steps.find_steps`' table.  Steps are replayed in groups of up to
    ``group_steps`` consecutive complete steps; the first step of a group starts from the
    recorded state, so a group's other steps are the steady state.
    """
    return Replayer(events, links, steps, group_steps=group_steps).run(edits)


class Replayer:
    """The complete steps of a trace prepared for replay once — every group's graph, its sweep
    order and its step marks — so that several rounds of edits (a fix plan asks one round per
    step it adds) pay for the edits' marks and the sweeps only, never for building the graphs again."""

    def __init__(self, events: pl.DataFrame, links: pl.DataFrame, steps: pl.DataFrame, *, group_steps: int = GROUP_STEPS) -> None:
        complete = steps.filter(pl.col("complete") & (pl.col("end_ns") > pl.col("start_ns"))).sort(["rank", "start_ns"])
        self._events, self._links = events, links
        self._pinned_bw = PINNED_BW
        self._single = False
        self._copy_bytes = pl.DataFrame()
        self._groups: list[_Prepared] = []
        #: each collapse rule's intervals on the events, computed once for every round
        self._spans: dict[SpanRule, pl.DataFrame] = {}
        if complete.height == 0:
            return
        self._pinned_bw = _pinned_bandwidth(events)
        self._single = _single_process_loader(events)
        self._copy_bytes = _copy_bytes(events, links)
        size = max(group_steps, 2)
        groups = [
            (int(rank), per_rank.slice(lo, size))
            for (rank,), per_rank in complete.partition_by("rank", as_dict=True, maintain_order=True).items()
            for lo in range(0, per_rank.height, size)
        ]
        self._groups = _in_pool(lambda g: _prepare_group(events, links, g[0], g[1]), groups)

    def run(self, edits: Sequence[Edit] = ()) -> Replay:
        """The prepared steps replayed unchanged and under each of ``edits`` (one column each)."""
        cols = {f"{e.label}_ns": pl.Int64 for e in edits}
        if not self._groups:
            return Replay(steps=pl.DataFrame(schema={**_STEP_SCHEMA, **cols}), edits=tuple(edits))
        collapsed = {e.label: _collapsed(e, self._events, self._links, self._spans) for e in edits if e.collapse is not None}
        parts = _in_pool(
            lambda g: _sweep_group(g, edits, self._pinned_bw, self._single, self._copy_bytes, collapsed), self._groups
        )
        busy: dict[str, int] = {}
        for _, totals in parts:
            for label, ns in totals.items():
                busy[label] = busy.get(label, 0) + ns
        return Replay(steps=pl.concat([p for p, _ in parts], how="vertical_relaxed"), edits=tuple(edits), gpu_busy_ns=busy)


def _in_pool(fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    """``fn`` over ``items`` in order, side by side on :data:`REPLAY_THREADS` threads when
    there are several (the graph builder's polars queries and the native sweeps release the GIL)."""
    if len(items) <= 1:
        return [fn(i) for i in items]
    pool = ThreadPoolExecutor(max_workers=REPLAY_THREADS, thread_name_prefix="tracekit-replay")
    try:
        return list(pool.map(fn, items))  # (in the items' order)
    finally:
        # an error or Ctrl-C: the items not started yet are dropped, not run
        pool.shutdown(wait=True, cancel_futures=True)


def _single_process_loader(events: pl.DataFrame) -> bool:
    """Whether the trace's DataLoader runs in the main process (``num_workers=0``): there the
    main thread pins each batch itself."""
    return bool(events.select(pl.col("name").str.contains("SingleProcessDataLoaderIter").any()).item())


def _pinned_bandwidth(events: pl.DataFrame) -> float:
    """Host→device bandwidth of the trace's pinned copies (GB/s), else :data:`PINNED_BW`."""
    pinned = events.filter(
        (pl.col("kind") == EventKind.MEMCPY.value) & (pl.col("src_memory") == "pinned") & (pl.col("bytes") >= _BW_MIN_BYTES) & (pl.col("dur_ns") > 0)
    )
    if pinned.height == 0:
        return PINNED_BW
    return float(pinned.select((pl.col("bytes") / pl.col("dur_ns")).median()).item())


def _copy_bytes(events: pl.DataFrame, links: pl.DataFrame) -> pl.DataFrame:
    """event_id (a pageable copy) → bytes, and launch_id (its host call) → bytes."""
    copies = events.filter(
        (pl.col("kind") == EventKind.MEMCPY.value) & ((pl.col("src_memory") == "pageable") | (pl.col("dst_memory") == "pageable"))
    ).select("event_id", pl.col("bytes").fill_null(0).cast(pl.Int64), "dur_ns")
    return copies.join(
        links.select(pl.col("gpu_event_id").alias("event_id"), pl.col("launch_event_id").alias("launch_id")), on="event_id", how="left"
    )


@dataclass(frozen=True)
class _Collapsed:
    """What an edit's collapse rule removes: its host intervals (pid, tid, _cs, _ce), and the
    events that start inside one (host calls and the GPU activities they launched)."""

    spans: pl.DataFrame
    ids: pl.Series


def _collapsed(e: Edit, events: pl.DataFrame, links: pl.DataFrame, found: dict[SpanRule, pl.DataFrame] | None = None) -> _Collapsed:
    """The intervals ``e.collapse`` marks and the events inside them (see :attr:`Edit.collapse`).
    ``found``: each rule's intervals already computed on these events (filled in here), so
    that a rule shared by several edits (a plan's combined fixes) runs once."""
    assert e.collapse is not None
    found = {} if found is None else found
    parts = []
    for rule in base_rules(e.collapse):
        if rule not in found:
            found[rule] = interval_columns(rule(events, links))
        parts.append(found[rule])
    spans = pl.concat(parts).select("pid", "tid", pl.col("start_ns").alias("_cs"), pl.col("end_ns").alias("_ce")).sort("_cs")
    if spans.height == 0:
        return _Collapsed(spans=spans, ids=pl.Series("event_id", [], dtype=pl.Int64))
    host = events.filter(pl.col("pid").is_not_null() & pl.col("tid").is_not_null() & pl.col("kind").is_in(_HOST_KINDS)).select(
        "event_id", pl.col("pid").cast(pl.Int64), pl.col("tid").cast(pl.Int64), "start_ns", "end_ns"
    )
    inside = _within(host, spans, "start_ns", "end_ns")["event_id"]
    launched = links.filter(pl.col("launch_event_id").is_in(inside.implode()))["gpu_event_id"]
    return _Collapsed(spans=spans, ids=pl.concat([inside, launched.cast(inside.dtype)]).unique())


def _within(rows: pl.DataFrame, spans: pl.DataFrame, start: str, end: str) -> pl.DataFrame:
    """The rows (with pid, tid and the ``start``/``end`` columns) that lie inside a span of their thread."""
    if rows.height == 0 or spans.height == 0:
        return rows.clear()
    found = rows.sort(start).join_asof(spans, left_on=start, right_on="_cs", by=["pid", "tid"], strategy="backward", check_sortedness=False)
    return found.filter(pl.col("_ce").is_not_null() & (pl.col(end) <= pl.col("_ce"))).drop("_cs", "_ce")


def _marked(base: pl.DataFrame, edits: Sequence[Edit], collapsed: dict[str, _Collapsed], launches: pl.Series) -> pl.DataFrame:
    """``base`` with the per-edge facts the edits' rules read: the host cost of a region's replay
    on its first captured stretch (:func:`_graph_regions`; a column per capture and set of
    removed host tags, :func:`_regions_column`) when an edit captures graphs, and
    ``_in_<label>`` (the edge lies inside the intervals of that edit's collapse rule).
    ``launches``: the event ids of the calls that launched GPU work."""
    for column, (capture, gone) in {_regions_column(e): (e.graphs, _gone(e)) for e in edits if e.graphs is not None}.items():
        base = base.with_columns(_graph_regions(base, capture, gone, launches).alias(column))
    for e in edits:
        c = collapsed.get(e.label)
        if c is None:
            continue
        host = base.with_row_index("_row").filter(pl.col("kind").is_in(_HOST_EDGE_KINDS) & pl.col("pid").is_not_null())
        rows = _within(host.select("_row", pl.col("pid").cast(pl.Int64), pl.col("tid").cast(pl.Int64), "start_ns", "end_ns"), c.spans, "start_ns", "end_ns")
        in_host = pl.int_range(pl.len()).is_in(rows["_row"].implode())
        by_id = pl.col("kind").is_in([EdgeKind.GPU.value, EdgeKind.SYNC.value]) & pl.col("event_id").is_in(c.ids.implode())
        # what held a removed activity back (its launch, its stream's previous activity) goes with it
        starts = base.filter((pl.col("kind") == EdgeKind.GPU.value) & pl.col("event_id").is_in(c.ids.implode()))["src"]
        into = pl.col("kind").is_in([EdgeKind.LAUNCH.value, EdgeKind.STREAM.value, EdgeKind.CROSS_STREAM.value]) & pl.col("dst").is_in(starts.implode())
        base = base.with_columns((in_host | by_id | into).fill_null(False).alias(f"_in_{e.label}"))
    return base


def _gone(e: Edit) -> frozenset[str]:
    """The host tags whose work the edit removes (factor 0): the calls are gone from the
    program, so they end no captured region (an ``.item()`` dropped between two layers
    leaves one region where there were two)."""
    return frozenset(tag for tag, factor in e.host.items() if factor == 0.0)


def _regions_column(e: Edit) -> str:
    """The column of ``base`` holding the replay costs of ``e``'s captured regions."""
    g = e.graphs
    assert g is not None
    return f"_graph_replay:{g.replay_ns},{g.node_ns},{g.host_ns}:{','.join(sorted(_gone(e)))}"


def _captured(capture: GraphCapture, gone: frozenset[str]) -> pl.Expr:
    """A host stretch inside a captured region (see :class:`GraphCapture`), or one of host
    work the edit removes (``gone``: tags), which weighs nothing and ends no region."""
    short = (pl.col("tag") == "cpu") & (pl.col("w") < capture.host_ns)
    removed = pl.col("tag").is_in(sorted(gone)) if gone else pl.lit(False)
    return (pl.col("kind") == EdgeKind.CPU.value) & ((pl.col("tag") == "launch") | short | removed)


def _graph_regions(base: pl.DataFrame, capture: GraphCapture, gone: frozenset[str], launches: pl.Series) -> pl.Series:
    """The host cost of each region's replay, on the region's first captured stretch (the first
    of its thread after something that could not be captured, or the thread's first), null on
    every other edge: one replay plus :attr:`GraphCapture.node_ns` for every launch call the
    region holds (a call's stretches count once), all paid before its first kernel starts.
    ``gone``: host tags the edit removes (:func:`_gone`)."""
    chain = base.with_row_index("_row").filter(pl.col("kind").is_in(_HOST_EDGE_KINDS) & pl.col("pid").is_not_null())
    chain = chain.sort(["pid", "tid", "start_ns", "end_ns"]).with_columns(_captured(capture, gone).alias("_in"))
    first = pl.col("_in") & ~pl.col("_in").shift(1).over(["pid", "tid"]).fill_null(False)
    chain = chain.with_columns(first.alias("_first")).with_columns(pl.col("_first").cum_sum().over(["pid", "tid"]).alias("_region"))
    calls = chain.filter(pl.col("_in") & pl.col("event_id").is_in(launches.implode())).group_by("pid", "tid", "_region").agg(
        pl.col("event_id").n_unique().alias("_calls")
    )
    firsts = chain.filter(pl.col("_first")).join(calls, on=["pid", "tid", "_region"], how="left").select(
        "_row", (capture.replay_ns + capture.node_ns * pl.col("_calls").fill_null(0)).cast(pl.Float64).alias("_graph_replay")
    )
    rows = base.select(pl.int_range(pl.len(), dtype=pl.UInt32).alias("_row"))
    return rows.join(firsts, on="_row", how="left", maintain_order="left")["_graph_replay"]


def _window(rank: int, group: pl.DataFrame) -> pl.DataFrame:
    """One window spanning the group's steps (the graph of the whole group is one graph)."""
    w0 = int(group["start_ns"].min())  # type: ignore[arg-type]
    w1 = int(group["end_ns"].max())  # type: ignore[arg-type]
    cpu_end = group["cpu_end_ns"].max() if "cpu_end_ns" in group.columns else None
    return pl.DataFrame(
        {"rank": [rank], "step": [0], "start_ns": [w0], "end_ns": [w1], "cpu_end_ns": [cpu_end if cpu_end is not None else w1], "complete": [True]},
        schema={"rank": pl.Int32, "step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "cpu_end_ns": pl.Int64, "complete": pl.Boolean},
    )


def _near(events: pl.DataFrame, links: pl.DataFrame, near: pl.Expr) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The events a group's graph can use, and the links touching them: the graph builder
    joins links only to its events (either end), so the others never matter, and the
    whole trace's links table is not joined once per group."""
    kept = events.filter(near)
    ids = kept["event_id"].implode()
    return kept, links.filter(pl.col("launch_event_id").is_in(ids) | pl.col("gpu_event_id").is_in(ids))


@dataclass(frozen=True)
class _Prepared:
    """One group of steps ready to sweep: its recorded columns and, when it has edges, its
    graph in sweep order with the marks that turn node times into step durations."""

    #: rank, step, steady, measured_ns, recorded_ns of the group's steps
    head: dict[str, list[Any]]
    #: the group's edges (src, dst, w, kind, tag, removable, event_id, pid, tid, start_ns,
    #: end_ns); None: no edges
    base: pl.DataFrame | None = None
    plan: _Plan | None = None
    markers: list[int | None] = field(default_factory=list)
    owner: pl.DataFrame | None = None
    #: the event ids of the calls that launched the group's GPU work
    launches: pl.Series | None = None


#: one window: its source S is node 0 and its sink T node 1
_T_NODE = 1


def _prepare_group(events: pl.DataFrame, links: pl.DataFrame, rank: int, group: pl.DataFrame) -> _Prepared:
    window = _window(rank, group)
    # the rows the graph can use (build_graph keeps the events overlapping the window): taken
    # in one filter, so the rank's whole table is never copied for one group
    near = (pl.col("rank") == rank) & (pl.col("end_ns") >= window["start_ns"][0]) & (pl.col("start_ns") <= window["end_ns"][0])
    near_events, near_links = _near(events, links, near)
    graph = build_graph(near_events, near_links, window)
    nodes, edges = graph.nodes, graph.edges
    starts = group["start_ns"].to_list()
    measured = group["dur_ns"].to_list() if "dur_ns" in group.columns else [e - s for s, e in zip(starts, group["end_ns"].to_list(), strict=True)]
    head: dict[str, list[Any]] = {
        "rank": [rank] * group.height,
        "step": group["step"].to_list(),
        "steady": [i > 0 or group.height == 1 for i in range(group.height)],
        "measured_ns": measured,
    }
    if edges.height == 0:
        head["recorded_ns"] = [None] * group.height
        return _Prepared(head)
    markers, owner = _step_nodes(nodes, edges, starts, group["end_ns"].to_list())
    base = edges.select(
        "src", "dst", _stream_floor(edges).alias("w"), "kind", "tag", "removable", "event_id", "pid", "tid", "start_ns", "end_ns"
    )
    w0 = int(group["start_ns"].min())  # type: ignore[arg-type]
    ends = nodes["t"]
    lo, hi = int(ends.min()) - 1, int(ends.max()) + 1  # type: ignore[arg-type]
    times = nodes.select("node", pl.when(pl.col("node") == 0).then(lo).when(pl.col("node") == _T_NODE).then(hi).otherwise(pl.col("t")).alias("t"))
    # the order depends on the edges only, never on an edit's marks or weights
    plan = _order(base, times)
    recorded = nodes.select("node", (pl.col("t") - w0).alias("d"))
    head["recorded_ns"] = _steps_of(recorded, ["d"], markers, owner, _T_NODE, len(starts))[0]
    return _Prepared(head, base=base, plan=plan, markers=markers, owner=owner, launches=near_links["launch_event_id"])


def _sweep_group(
    g: _Prepared, edits: Sequence[Edit], pinned_bw: float, single: bool, copy_bytes: pl.DataFrame, collapsed: dict[str, _Collapsed]
) -> tuple[pl.DataFrame, dict[str, int]]:
    """The group's steps replayed unchanged and under each edit, and its GPU busy time under
    each (``replayed`` and every edit's label → ns: the GPU activities' summed durations)."""
    schema = {**_STEP_SCHEMA, **{f"{e.label}_ns": pl.Int64 for e in edits}}
    n = len(g.head["step"])
    out = dict(g.head)
    if g.base is None or g.plan is None or g.owner is None or g.launches is None:
        for col in schema:
            out.setdefault(col, [None] * n)
        return pl.DataFrame(out, schema=schema), {}
    base = _marked(g.base, edits, collapsed, g.launches)
    # every edit's weights in one pass; an edit that changes no edge (its cause is absent from
    # the group) replays the same as the unchanged graph, the others are swept together
    weighted = base.select("w", *(_edited(e, base, pinned_bw, single, copy_bytes).alias(f"_e{i}") for i, e in enumerate(edits)))
    changed = [f"_e{i}" for i in range(len(edits)) if not bool(weighted[f"_e{i}"].eq_missing(weighted["w"]).all())]
    swept = _sweeps(g.plan, weighted, ["w", *changed])
    dist = pl.DataFrame({"node": g.plan.nodes, **{c: d for c, d in zip(["w", *changed], swept, strict=True)}})
    durations = dict(zip(["w", *changed], _steps_of(dist, ["w", *changed], g.markers, g.owner, _T_NODE, n), strict=True))
    out["replayed_ns"] = durations["w"]
    for i, e in enumerate(edits):
        out[f"{e.label}_ns"] = list(durations.get(f"_e{i}", durations["w"]))
    gpu = weighted.filter(base["kind"] == EdgeKind.GPU.value).select(pl.all().clip(lower_bound=0).sum())
    busy = {"replayed": int(gpu["w"][0] or 0), **{e.label: int(gpu[f"_e{i}"][0] or 0) for i, e in enumerate(edits)}}
    return pl.DataFrame(out, schema=schema), busy


def replay_schedule(events: pl.DataFrame, links: pl.DataFrame, steps: pl.DataFrame, edit: Edit | None = None) -> pl.DataFrame:
    """The replayed schedule of every GPU activity: rank, event_id, track, start_ns, end_ns
    (all complete steps of a rank as one group; for inspection and tests)."""
    complete = steps.filter(pl.col("complete") & (pl.col("end_ns") > pl.col("start_ns")))
    parts = []
    schema = {"rank": pl.Int32, "event_id": pl.Int64, "track": pl.String, "start_ns": pl.Int64, "end_ns": pl.Int64}
    for (rank,), group in complete.partition_by("rank", as_dict=True, maintain_order=True).items():
        win = _window(int(rank), group)
        graph = build_graph(events.filter(pl.col("rank") == rank), links, win)
        if graph.edges.height == 0:
            continue
        base = graph.edges.select(
            "src", "dst", _stream_floor(graph.edges).alias("w"), "kind", "tag", "removable", "event_id", "pid", "tid", "start_ns", "end_ns"
        )
        if edit is not None:
            collapsed = {edit.label: _collapsed(edit, events, links)} if edit.collapse is not None else {}
            base = _marked(base, [edit], collapsed, links["launch_event_id"])
            single = _single_process_loader(events)
            base = base.with_columns(_edited(edit, base, _pinned_bandwidth(events), single, _copy_bytes(events, links)).alias("w"))
        base = base.drop_nulls("w")
        dist = _sweep(_order(base), base, "w")
        w0 = int(win["start_ns"][0])
        gpu = graph.nodes.filter(pl.col("is_end").is_not_null()).select(
            "event_id", "track", "is_end", pl.col("node").replace_strict(dist, default=None, return_dtype=pl.Int64).alias("_d")
        )
        wide = gpu.filter(~pl.col("is_end")).select("event_id", "track", (pl.col("_d") + w0).alias("start_ns")).join(
            gpu.filter(pl.col("is_end")).select("event_id", (pl.col("_d") + w0).alias("end_ns")), on="event_id"
        )
        parts.append(wide.select(pl.lit(int(rank), dtype=pl.Int32).alias("rank"), "event_id", "track", "start_ns", "end_ns"))
    return pl.concat(parts) if parts else pl.DataFrame(schema=schema)


def _stream_floor(edges: pl.DataFrame) -> pl.Expr:
    """Edge weights where a stream edge keeps at least the device's back-to-back gap (the
    median gap of work the stream held back, else :data:`STREAM_GAP_NS`), never more than the
    recorded gap: the recorded schedule still satisfies it, and work that waited for its launch
    cannot run closer than the device allows once the launch comes earlier."""
    stream = pl.col("kind") == EdgeKind.STREAM.value
    held = edges.filter((pl.col("kind") == EdgeKind.STREAM.value) & (pl.col("w") > 0))["w"]
    gap = int(held.median()) if held.len() else STREAM_GAP_NS  # type: ignore[arg-type]
    recorded = (pl.col("end_ns") - pl.col("start_ns")).clip(lower_bound=0)
    return pl.when(stream).then(pl.max_horizontal(pl.col("w"), pl.min_horizontal(recorded, gap))).otherwise(pl.col("w"))


def _edited(e: Edit, edges: pl.DataFrame, pinned_bw: float, single: bool, copy_bytes: pl.DataFrame) -> pl.Expr:
    """Every edge's weight under ``e`` (null: the edge is removed)."""
    w = pl.col("w").cast(pl.Float64)
    host_kinds = [EdgeKind.CPU.value, EdgeKind.DATA_LOADING.value]
    expr = w
    for tag, factor in e.host.items():
        expr = pl.when(pl.col("kind").is_in(host_kinds) & (pl.col("tag") == tag)).then(w * factor).otherwise(expr)
    if e.launch_factor != 1.0:
        expr = pl.when(pl.col("kind") == EdgeKind.LAUNCH.value).then(w * e.launch_factor).otherwise(expr)
    for tag, factor in e.gpu.items():
        expr = pl.when((pl.col("kind") == EdgeKind.GPU.value) & (pl.col("tag") == tag)).then(w * factor).otherwise(expr)
    if e.graphs is not None:
        expr = _graph_weights(e.graphs, _gone(e), _regions_column(e), expr)
    if e.collapse is not None and f"_in_{e.label}" in edges.columns:
        inside = pl.col(f"_in_{e.label}")
        expr = pl.when(inside & (pl.col("kind") == EdgeKind.SYNC.value)).then(None).when(inside).then(0.0).otherwise(expr)
    if e.pin:
        # a pinned copy runs at pinned bandwidth (never slower than it was); a small one keeps
        # its blocking (its bytes are below the edit's bound)
        copy_bytes = copy_bytes.filter(pl.col("bytes") >= e.pin_min_bytes)
        gpu_bytes = dict(zip(copy_bytes["event_id"].to_list(), copy_bytes["bytes"].to_list(), strict=True))
        pinned = pl.col("event_id").replace_strict(gpu_bytes, default=None, return_dtype=pl.Float64) / pinned_bw
        expr = pl.when((pl.col("kind") == EdgeKind.GPU.value) & (pl.col("tag") == "pageable_memcpy") & pinned.is_not_null()).then(
            pl.min_horizontal(w, pinned)
        ).otherwise(expr)
        if single and not e.workers:
            # no workers: the main thread copies the batch into pinned memory (the DataLoader's
            # pin_memory) before the copy call launches it, so the host stretch that ends where
            # the call starts grows by the host copy, and the copy waits for it
            call_bytes = copy_bytes.drop_nulls("launch_id").group_by("launch_id").agg(pl.col("bytes").sum())
            starts = (
                edges.filter(pl.col("kind") == EdgeKind.LAUNCH.value)
                .join(call_bytes.rename({"launch_id": "event_id"}), on="event_id")
                .group_by("src")
                .agg(pl.col("bytes").first())
            )
            per_node = dict(zip(starts["src"].to_list(), starts["bytes"].to_list(), strict=True))
            host_copy = pl.col("dst").replace_strict(per_node, default=None, return_dtype=pl.Float64) / HOST_COPY_BW
            into = pl.col("kind").is_in([*host_kinds, EdgeKind.WINDOW.value]) & host_copy.is_not_null()
            expr = pl.when(into).then(expr + host_copy).otherwise(expr)
    if e.drop_sync:
        dropped = (pl.col("kind") == EdgeKind.SYNC.value) & pl.col("removable") & pl.col("tag").is_in(sorted(e.drop_sync))
        if e.pin and e.pin_min_bytes and "pageable_memcpy" in e.drop_sync:
            # a pageable copy below the bound keeps its wait (the sync edge names its call)
            small = copy_bytes.filter(pl.col("bytes") < e.pin_min_bytes)["launch_id"].drop_nulls()
            dropped = dropped & ~((pl.col("tag") == "pageable_memcpy") & pl.col("event_id").is_in(small.implode()))
        expr = pl.when(dropped).then(None).otherwise(expr)
    return expr.round(0).cast(pl.Int64)


def _graph_weights(capture: GraphCapture, gone: frozenset[str], regions: str, expr: pl.Expr) -> pl.Expr:
    """Edge weights under CUDA graphs: a captured host stretch weighs nothing except the first
    of its region, which pays one replay (column ``regions``); the hand-overs between the
    driving thread and the autograd thread are gone (the replay runs the backward's kernels
    too); consecutive GPU activities run at most the graph's kernel gap apart."""
    captured = _captured(capture, gone)
    return (
        pl.when(captured & pl.col(regions).is_not_null()).then(pl.col(regions))
        .when(captured | (pl.col("kind") == EdgeKind.WAKE.value)).then(0.0)
        .when(pl.col("kind") == EdgeKind.STREAM.value).then(pl.min_horizontal(expr, pl.lit(float(capture.kernel_gap_ns))))
        .otherwise(expr)
    )


@dataclass(frozen=True)
class _Plan:
    """A graph prepared for sweeps: node ids, and its edges in the order a sweep relaxes them
    (by their head's topological position), as node indices."""

    #: node ids (Int64, ascending): a node's index is its position here
    nodes: pl.Series
    #: edge rows of the frame, in sweep order (edges dropped to break cycles left out)
    rows: pl.Series
    #: the edges' tail and head node indices, in sweep order
    src: pl.Series
    dst: pl.Series
    #: how many edges had to go to make the graph acyclic (clock skew can close a loop)
    broken: int


def _order(edges: pl.DataFrame, times: pl.DataFrame | None = None) -> _Plan:
    """A topological order of the graph.  Any topological order gives the same longest
    distances, so the cheapest is taken: Kahn's in native code where it is built; otherwise
    the recorded time order of the nodes when every edge goes forward in it (``times``: node →
    t; checked vectorised), else Kahn's in Python.  A cycle (clock skew) is broken by
    dropping the lightest edge of each loop (networkx) before Kahn's order is taken."""
    nodes = pl.concat([edges["src"], edges["dst"]]).unique().sort().cast(pl.Int64).rename("node")
    s_idx = nodes.search_sorted(edges["src"]).cast(pl.Int64)
    d_idx = nodes.search_sorted(edges["dst"]).cast(pl.Int64)
    if times is not None and edges.height and not native_available():
        t = pl.DataFrame({"node": nodes}).join(times.select("node", "t"), on="node", how="left", maintain_order="left")["t"]
        if t.null_count() == 0:
            # rank by (recorded time, depth among nodes of the same time, node id): the order a
            # recording that respects every dependency already has; clock skew breaks it, then Kahn
            level = _tie_levels(t, s_idx, d_idx)
            rank = pl.DataFrame({"t": t, "l": level, "i": pl.int_range(nodes.len(), eager=True)}).sort(["t", "l", "i"]).with_row_index("r").sort("i")["r"]
            r = pl.DataFrame({"s": rank.gather(s_idx), "d": rank.gather(d_idx)}).with_row_index("row")
            if bool((r["s"] < r["d"]).all()):
                ordered = r.sort("d", maintain_order=True)
                rows = ordered["row"].cast(pl.Int64)
                return _Plan(nodes=nodes, rows=rows, src=s_idx.gather(rows), dst=d_idx.gather(rows), broken=0)
    n = nodes.len()
    keep = pl.int_range(edges.height, dtype=pl.Int64, eager=True)
    broken = 0
    pos = topological(n, s_idx, d_idx)
    if pos is None:
        s = s_idx.to_list()
        d = d_idx.to_list()
        G = nx.DiGraph()
        G.add_weighted_edges_from(zip(s, d, edges["w"].to_list(), strict=True), weight="w")
        before = set(G.edges)
        _, broken = acyclic_order(G)
        gone = before - set(G.edges)
        keep = pl.Series([i for i in range(len(s)) if (s[i], d[i]) not in gone], dtype=pl.Int64)
        pos = topological(n, s_idx.gather(keep), d_idx.gather(keep))
        assert pos is not None
    order = pl.DataFrame({"row": keep, "_p": pos.gather(d_idx.gather(keep))}).sort("_p", maintain_order=True)
    rows = order["row"]
    return _Plan(nodes=nodes, rows=rows, src=s_idx.gather(rows), dst=d_idx.gather(rows), broken=broken)


#: rounds of tie-breaking among nodes recorded at the same instant before Kahn's order is used
_TIE_ROUNDS = 32


def _tie_levels(t: pl.Series, s_idx: pl.Series, d_idx: pl.Series) -> pl.Series:
    """Each node's depth along edges between nodes recorded at the same instant (0 for most),
    relaxed vectorised for a bounded number of rounds (a zero-length chain is short)."""
    level = pl.zeros(t.len(), dtype=pl.Int64, eager=True)
    same = pl.DataFrame({"s": s_idx, "d": d_idx}).filter(t.gather(pl.Series(s_idx)) == t.gather(pl.Series(d_idx)))
    for _ in range(_TIE_ROUNDS):
        if same.height == 0:
            break
        step = same.with_columns((level.gather(same["s"]) + 1).alias("v")).group_by("d").agg(pl.col("v").max())
        step = step.with_columns(level.gather(step["d"]).alias("old")).filter(pl.col("v") > pl.col("old"))
        if step.height == 0:
            break
        level = level.scatter(step["d"], step["v"])
    return level


#: the weight of a removed edge: it never decides a start (every time is at least 0)
_GONE = -(1 << 60)


def _sweeps(plan: _Plan, edges: pl.DataFrame, cols: Sequence[str]) -> list[pl.Series]:
    """Every node's replayed offset from the window start under each weight column, in
    ``plan.nodes``' order: its longest distance from a source (edges relaxed in topological
    order of their heads; all columns in one native pass, :mod:`.sweep`).  Removed edges
    (null weight) are skipped; a node left without predecessors starts at 0."""
    weights = edges.select(pl.col(c).fill_null(_GONE).cast(pl.Int64).gather(plan.rows) for c in cols)
    return longest(plan.nodes.len(), plan.src, plan.dst, [weights[c] for c in cols])


def _sweep(plan: _Plan, edges: pl.DataFrame, col: str) -> dict[int, int]:
    """:func:`_sweeps` of one column, keyed by node id."""
    return dict(zip(plan.nodes.to_list(), _sweeps(plan, edges, [col])[0].to_list(), strict=True))


def _step_nodes(nodes: pl.DataFrame, edges: pl.DataFrame, starts: list[int], ends: list[int]) -> tuple[list[int | None], pl.DataFrame]:
    """(the driving thread's node at every step's start, GPU node → the step that launched it
    as columns node, k: the step of its launch call, else of its recorded start when nothing
    recorded launched it).  End nodes map to ``k``, start nodes to ``-1 - k``."""
    first = edges.filter((pl.col("src") == 0) & (pl.col("kind") == EdgeKind.WINDOW.value) & (pl.col("tag") == "cpu"))
    main = nodes.join(first.select(pl.col("dst").alias("node")), on="node", how="semi").filter(pl.col("pid").is_not_null())
    markers: list[int | None] = [None] * len(starts)
    bounds = pl.DataFrame({"_s": starts}, schema={"_s": pl.Int64}).with_row_index("_k").sort("_s")
    if main.height:
        pid, tid = main["pid"][0], main["tid"][0]
        chain = nodes.filter((pl.col("pid") == pid) & (pl.col("tid") == tid)).sort("t")
        found = bounds.join_asof(chain.select("t", "node"), left_on="_s", right_on="t", strategy="forward").sort("_k")
        # an instant of the driving thread inside the step marks its start (none: the thread
        # was inside one long range, and GPU work alone bounds the step)
        markers = [
            None if v is None or t is None or t >= end else int(v)
            for v, t, end in zip(found["node"].to_list(), found["t"].to_list(), ends, strict=True)
        ]
    launched = edges.filter(pl.col("kind") == EdgeKind.LAUNCH.value).group_by("dst").agg(pl.col("start_ns").min().alias("_c"))
    gpu_starts = nodes.filter(pl.col("is_end").is_not_null() & ~pl.col("is_end")).select("node", "t").join(
        launched.rename({"dst": "node"}), on="node", how="left"
    ).with_columns(pl.coalesce("_c", "t").alias("_at"))
    owned = gpu_starts.sort("_at").join_asof(bounds, left_on="_at", right_on="_s", strategy="backward").with_columns(
        pl.col("_k").fill_null(0).cast(pl.Int64)
    )
    end_nodes = owned.select((pl.col("node") + 1).alias("node"), "_k")  # an activity's end node follows its start node
    start_nodes = owned.select("node", (-1 - pl.col("_k")).alias("_k"))
    return markers, pl.concat([end_nodes, start_nodes]).select(pl.col("node").cast(pl.Int64), pl.col("_k").cast(pl.Int64).alias("k"))


def _steps_of(
    dist: pl.DataFrame, cols: Sequence[str], markers: list[int | None], owner: pl.DataFrame, t_node: int, n: int
) -> list[list[int]]:
    """Step durations from node times (``dist``: node and one time column per scenario, in
    ``cols``), per scenario: step k ends when the host starts step k + 1 and the GPU finished
    what step k launched, whichever is later (the last step: when everything finished).
    Without a recorded host thread, GPU work alone bounds the steps."""
    timed = owner.join(dist, on="node")
    ends = timed.filter(pl.col("k") >= 0).group_by("k").agg(pl.col(c).max() for c in cols)
    firsts = timed.filter(pl.col("k") < 0).group_by("k").agg(pl.col(c).min() for c in cols)
    wanted = [m for m in markers if m is not None] + [t_node]
    marked = dist.filter(pl.col("node").is_in(wanted))
    end_k, first_k, marked_nodes = ends["k"].to_list(), firsts["k"].to_list(), marked["node"].to_list()
    out: list[list[int]] = []
    for c in cols:
        done = [0] * n
        for k, d in zip(end_k, ends[c].to_list(), strict=True):
            if d is not None and 0 <= k < n:
                done[k] = max(d, 0)
        begin: list[int | None] = [None] * n
        for k, d in zip(first_k, firsts[c].to_list(), strict=True):
            if 0 <= -1 - k < n:
                begin[-1 - k] = d
        at = dict(zip(marked_nodes, marked[c].to_list(), strict=True))
        start = [None if m is None else at.get(m) for m in markers]
        first = start[0] if start[0] is not None else (begin[0] if begin[0] is not None else 0)
        bounds: list[int] = [first]
        for k in range(n):
            nxt = start[k + 1] if k + 1 < n else at.get(t_node)
            if k + 1 < n and nxt is None:
                nxt = begin[k + 1]
            bounds.append(max(nxt or 0, done[k], bounds[-1]))
        out.append([b - a for a, b in itertools.pairwise(bounds)])
    return out


def median(values: Sequence[float]) -> float | None:
    return float(statistics.median(values)) if values else None


# --------------------------------------------------------------------------------------------
# pricing findings and what-ifs (what diagnose uses)

#: the replay prices fixes on a trace only when replaying it unchanged is this close to the
#: recording; otherwise the critical path's per-step what-ifs stay (and a note says so)
TRUST_ERROR = 0.05
#: on a long trace (more events than :data:`MAX_REPLAY_EVENTS`) the replay prices fixes on at
#: most this many groups of steps, spread evenly over each rank, each holding about
#: :data:`GROUP_EVENTS` events (at least 3 steps), so the replay's work is bounded whatever
#: the trace's length (about MAX_GROUPS × GROUP_EVENTS events per rank)
MAX_GROUPS = 3
MAX_REPLAY_EVENTS = 300_000
GROUP_EVENTS = 100_000
#: a fix whose mean saving over the steady steps exceeds its saving in the median step by at
#: least this share of the step prices an intermittent cause (a stall in some steps only, which
#: the median step does not see): it is stated as its mean saving per step (see :class:`Pricing`)
INTERMITTENT_SHARE = 0.05


@dataclass(frozen=True)
class Pricing:
    """What the replay says about a diagnosis' findings and what-ifs."""

    replay: Replay | None
    #: finding kind → (saving ms per step, predicted step ms) under its modelled fix
    fixes: dict[str, tuple[float, float]]
    #: the caller's what-ifs answered by the replay (label → predicted step ms)
    what_ifs: dict[str, float]
    #: finding kind → its fix's saving on the mean steady-state step (share of it)
    mean_shares: dict[str, float]
    trusted: bool
    notes: tuple[str, ...] = ()
    #: finding kind → (its fix's saving in the median step, the mean steady step), both ms, for
    #: the causes present in only some steps (:data:`INTERMITTENT_SHARE`).  Such a cause is
    #: stated as its fix's *mean* saving per steady step (``fixes``' saving), while its
    #: predicted step stays the median step once fixed: the headline's statistic, which a stall
    #: in every k-th step barely moves
    intermittent: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: the replayed steps, prepared: further rounds of edits (the fix plan's) sweep them again
    replayer: Replayer | None = None


def _sampled_steps(events: pl.DataFrame, steps: pl.DataFrame, group_steps: int) -> tuple[pl.DataFrame, int]:
    """(the complete steps to replay, the group size): all of them, or on a long trace up to
    :data:`MAX_GROUPS` groups of about :data:`GROUP_EVENTS` events spread over each rank."""
    complete = steps.filter(pl.col("complete") & (pl.col("end_ns") > pl.col("start_ns"))).sort(["rank", "start_ns"])
    if events.height <= MAX_REPLAY_EVENTS or complete.height == 0:
        return complete, group_steps
    per_step = events.height / complete.height
    size = max(3, min(group_steps, int(GROUP_EVENTS / max(per_step, 1.0))))
    parts: list[pl.DataFrame] = []
    for (_rank,), per_rank in complete.partition_by("rank", as_dict=True, maintain_order=True).items():
        n_groups = max(per_rank.height // size, 1)  # whole groups only
        spread = {round(i * (n_groups - 1) / (MAX_GROUPS - 1)) for i in range(MAX_GROUPS)}
        picks = range(n_groups) if n_groups <= MAX_GROUPS else sorted(spread)
        parts.extend(per_rank.slice(g * size, size) for g in picks)
    return pl.concat(parts), size


def price(
    kinds: Sequence[str], events: pl.DataFrame, links: pl.DataFrame, steps: pl.DataFrame, step_ms: float | None,
    what_ifs: Sequence[WhatIf] = (), *, group_steps: int = GROUP_STEPS,
) -> Pricing:
    """Replay the trace with each finding's modelled fix and each asked what-if.

    ``step_ms`` is the headline step time (the steps table's median); a prediction is it minus
    the replayed saving, so every number stays on the headline's scale and no prediction
    exceeds the current step.
    """
    edits = [e for k in dict.fromkeys(kinds) if (e := fix_edit(k)) is not None]
    asked = [what_if_edit(w) for w in what_ifs]
    chosen, size = _sampled_steps(events, steps, group_steps)
    if chosen.height == 0 or step_ms is None:
        return Pricing(replay=None, fixes={}, what_ifs={}, mean_shares={}, trusted=False)
    replayer = Replayer(events, links, chosen, group_steps=size)
    r = replayer.run([*edits, *asked])
    trusted = r.error is not None and r.error <= TRUST_ERROR
    notes: list[str] = []
    if r.error is not None and not trusted:
        notes.append(
            f"The replay of the steady state reproduces the recorded step time only within {100 * r.error:.1f}%; "
            "predicted step times come from the per-step critical path instead."
        )
    fixes: dict[str, tuple[float, float]] = {}
    means: dict[str, float] = {}
    answers: dict[str, float] = {}
    intermittent: dict[str, tuple[float, float]] = {}
    if trusted:
        for e in edits:
            saving = min(r.saving_ms(e.label) or 0.0, step_ms)
            mean_saving = min(r.mean_saving_ms(e.label) or 0.0, step_ms)
            means[e.label] = r.mean_saving_share(e.label) or 0.0
            if mean_saving - saving >= INTERMITTENT_SHARE * step_ms:
                # present in only some steps: the median step does not see it, the mean does;
                # the prediction stays the median step once fixed (the headline's statistic)
                intermittent[e.label] = (saving, r.mean_steady_ms("measured_ns") or step_ms)
                fixes[e.label] = (mean_saving, step_ms - saving)
                continue
            fixes[e.label] = (saving, step_ms - saving)
        for e in asked:
            delta = r.delta_ms(e.label)
            if delta is not None:
                answers[e.label] = max(step_ms - delta, 0.0)
    return Pricing(
        replay=r, fixes=fixes, what_ifs=answers, mean_shares=means, trusted=trusted, notes=tuple(notes), intermittent=intermittent,
        replayer=replayer,
    )


__all__ = [
    "FIX_MODELS", "GROUP_STEPS", "Edit", "Pricing", "Replay", "Replayer", "fix_edit", "median", "price", "replay", "replay_schedule", "what_if_edit",
]
