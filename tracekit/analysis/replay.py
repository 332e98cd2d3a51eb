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

A fix edits the graph the way the real fix edits the program (:data:`FIX_MODELS`), the
edited graph is replayed, and the fix's saving is the drop of the median replayed step.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import polars as pl

from ..schema import EventKind
from .critical_path import EdgeKind, _topological, build_graph
from .whatif import WHAT_IF_CAUSES, WhatIf

#: steps of one rank replayed together (a fix can move work across step boundaries)
GROUP_STEPS = 12
#: CUDA graphs / torch.compile: per-kernel host dispatch and launch cost is divided by this
LAUNCH_SPEEDUP = 20.0
#: AMP / TF32: fp32 GEMM and convolution kernels are divided by this
TENSOR_CORE_SPEEDUP = 2.5
#: host→device bandwidth from pinned memory (bytes/ns = GB/s) when the trace has no pinned copy
PINNED_BW = 24.0
#: host memory-copy bandwidth (GB/s): pinning a batch on the main thread costs bytes / this
HOST_COPY_BW = 10.0
#: the gap between back-to-back activities on a stream, when the trace shows none (ns)
STREAM_GAP_NS = 2_000
#: a copy this small says nothing about the link's bandwidth
_BW_MIN_BYTES = 1 << 20

#: finding kind → the fix the replay models (the report states it)
FIX_MODELS: dict[str, str] = {
    "data_loading": "the DataLoader's __next__ costs only a hand-off (workers keep up)",
    "host_device_sync": "the sync calls and the waits for the GPU behind them are gone (the host runs ahead)",
    "pageable_memcpy": (
        "pin_memory=True + non_blocking=True: copies no longer block the host and run at pinned bandwidth; "
        "with num_workers=0 the main thread pins each batch (a host copy at memory bandwidth)"
    ),
    "launch_bound": f"CUDA graphs / torch.compile: per-kernel host dispatch and launch cost ÷ {LAUNCH_SPEEDUP:g}",
    "small_batch": f"CUDA graphs / torch.compile: per-kernel host dispatch and launch cost ÷ {LAUNCH_SPEEDUP:g}",
    "allocator": "caching allocator: no cudaMalloc/cudaFree in the steady state",
    "no_tensor_cores": f"AMP/TF32: fp32 GEMM and convolution kernels ÷ {TENSOR_CORE_SPEEDUP:g}",
    "exposed_communication": "communication fully overlapped with compute (its kernels and host calls take no time)",
    "cpu_bound": "other host work (Python between operators, untraced time) removed",
}


@dataclass(frozen=True)
class Edit:
    """How one question edits the graph: tag → weight factor, and the GPU → host waits removed."""

    label: str
    #: tag → factor on host-side edges (cpu / data_loading / wake)
    host: Mapping[str, float] = field(default_factory=dict)
    #: tag → factor on GPU activities
    gpu: Mapping[str, float] = field(default_factory=dict)
    #: sync edges whose tag is in here are removed
    drop_sync: frozenset[str] = frozenset()
    #: pageable copies run at pinned bandwidth (and the main thread pins without workers)
    pin: bool = False
    #: factor on launch edges (call → GPU start)
    launch_factor: float = 1.0


def fix_edit(kind: str) -> Edit | None:
    """The graph edit that models fixing a finding of this kind (None: not modelled)."""
    if kind == "data_loading":
        return Edit(kind, host={"data_loading": 0.0})
    if kind == "host_device_sync":
        return Edit(kind, host={"sync": 0.0}, drop_sync=frozenset({"sync"}))
    if kind == "pageable_memcpy":
        return Edit(kind, drop_sync=frozenset({"pageable_memcpy"}), pin=True)
    if kind in ("launch_bound", "small_batch"):
        return Edit(kind, host={"launch": 1.0 / LAUNCH_SPEEDUP}, launch_factor=1.0 / LAUNCH_SPEEDUP)
    if kind == "allocator":
        return Edit(kind, host={"allocator": 0.0})
    if kind == "no_tensor_cores":
        return Edit(kind, gpu={"fp32_matmul": 1.0 / TENSOR_CORE_SPEEDUP})
    if kind == "exposed_communication":
        return Edit(kind, host={"collective": 0.0}, gpu={"comm_kernel": 0.0})
    if kind == "cpu_bound":
        return Edit(kind, host={"cpu": 0.0})
    return None


def what_if_edit(what_if: WhatIf) -> Edit:
    """A ``--what-if CAUSE=FACTOR`` question as a graph edit: the cause's tags are scaled on the
    host and the GPU alike; factor 0 on a cause whose tags carry waits removes the waits."""
    factors: dict[str, float] = {}
    drop: set[str] = set()
    for name, factor in what_if.factors:
        for tag in WHAT_IF_CAUSES[name]:
            factors[tag] = factor
            if factor == 0.0 and tag in ("sync", "pageable_memcpy"):
                drop.add(tag)
    return Edit(what_if.label, host=dict(factors), gpu=dict(factors), drop_sync=frozenset(drop))


@dataclass(frozen=True)
class Replay:
    """The replayed steps of a trace, unchanged and under each edit."""

    #: rank, step, measured_ns, replayed_ns, and one ``<label>_ns`` column per edit
    steps: pl.DataFrame
    #: the edits replayed, in order
    edits: tuple[Edit, ...]

    @property
    def measured_step_ms(self) -> float | None:
        return _median_ms(self.steps, "measured_ns")

    @property
    def replayed_step_ms(self) -> float | None:
        return _median_ms(self.steps, "replayed_ns")

    @property
    def error(self) -> float | None:
        """|median replayed step − median measured step| / median measured step."""
        m, r = self.measured_step_ms, self.replayed_step_ms
        if m is None or r is None or m <= 0:
            return None
        return abs(r - m) / m

    def saving_ms(self, label: str) -> float | None:
        """What the edit saves per step: the drop of the median replayed step (never negative)."""
        base, fixed = self.replayed_step_ms, _median_ms(self.steps, f"{label}_ns")
        if base is None or fixed is None:
            return None
        return max(0.0, base - fixed)

    def predicted_step_ms(self, label: str) -> float | None:
        """The measured median step minus the edit's saving."""
        m, s = self.measured_step_ms, self.saving_ms(label)
        return None if m is None or s is None else m - s


def _median_ms(steps: pl.DataFrame, col: str) -> float | None:
    if col not in steps.columns:
        return None
    v = steps.filter(pl.col("steady"))[col].drop_nulls()
    if v.len() == 0:
        v = steps[col].drop_nulls()
    return None if v.len() == 0 else float(v.median()) / 1e6  # type: ignore[arg-type]


_STEP_SCHEMA = {"rank": pl.Int32, "step": pl.Int64, "steady": pl.Boolean, "measured_ns": pl.Int64, "replayed_ns": pl.Int64}


def replay(
    events: pl.DataFrame, links: pl.DataFrame, steps: pl.DataFrame, edits: Sequence[Edit] = (), *, group_steps: int = GROUP_STEPS
) -> Replay:
    """Replay the complete steps of every rank, unchanged and under each of ``edits``.

    ``steps`` is :func:`.steps.find_steps`' table.  Steps are replayed in groups of up to
    ``group_steps`` consecutive complete steps; the first step of a group starts from the
    recorded state, so a group's other steps are the steady state.
    """
    complete = steps.filter(pl.col("complete") & (pl.col("end_ns") > pl.col("start_ns"))).sort(["rank", "start_ns"])
    cols = {f"{e.label}_ns": pl.Int64 for e in edits}
    frames: list[pl.DataFrame] = []
    if complete.height:
        pinned_bw = _pinned_bandwidth(events)
        single = bool(events.select(pl.col("name").str.contains("SingleProcessDataLoaderIter").any()).item())
        copy_bytes = _copy_bytes(events, links)
        for (rank,), per_rank in complete.partition_by("rank", as_dict=True, maintain_order=True).items():
            n = per_rank.height
            size = max(group_steps, 2)
            for lo in range(0, n, size):
                group = per_rank.slice(lo, size)
                frames.append(_replay_group(events, links, int(rank), group, edits, pinned_bw, single, copy_bytes))  # type: ignore[call-overload]
    if not frames:
        return Replay(steps=pl.DataFrame(schema={**_STEP_SCHEMA, **cols}), edits=tuple(edits))
    return Replay(steps=pl.concat(frames, how="vertical_relaxed"), edits=tuple(edits))


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


def _replay_group(
    events: pl.DataFrame, links: pl.DataFrame, rank: int, group: pl.DataFrame, edits: Sequence[Edit], pinned_bw: float, single: bool,
    copy_bytes: pl.DataFrame,
) -> pl.DataFrame:
    w0 = int(group["start_ns"].min())  # type: ignore[arg-type]
    w1 = int(group["end_ns"].max())  # type: ignore[arg-type]
    cpu_end = group["cpu_end_ns"].max()
    window = pl.DataFrame(
        {"rank": [rank], "step": [0], "start_ns": [w0], "end_ns": [w1], "cpu_end_ns": [cpu_end if cpu_end is not None else w1], "complete": [True]},
        schema={"rank": pl.Int32, "step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "cpu_end_ns": pl.Int64, "complete": pl.Boolean},
    )
    graph = build_graph(events.filter(pl.col("rank") == rank), links, window)
    nodes, edges = graph.nodes, graph.edges
    starts = group["start_ns"].to_list()
    measured = group["dur_ns"].to_list() if "dur_ns" in group.columns else [e - s for s, e in zip(starts, group["end_ns"].to_list(), strict=True)]
    out: dict[str, list[Any]] = {
        "rank": [rank] * group.height,
        "step": group["step"].to_list(),
        "steady": [i > 0 or group.height == 1 for i in range(group.height)],
        "measured_ns": measured,
    }
    if edges.height == 0:
        out["replayed_ns"] = [None] * group.height
        for e in edits:
            out[f"{e.label}_ns"] = [None] * group.height
        return pl.DataFrame(out, schema={**_STEP_SCHEMA, **{f"{e.label}_ns": pl.Int64 for e in edits}})
    markers, owner = _step_nodes(nodes, edges, starts)
    base = edges.select("src", "dst", _stream_floor(edges).alias("w"), "kind", "tag", "event_id", "end_ns")
    topo, dropped = _order(base)
    t_node = 1  # one window: its source S is node 0 and its sink T node 1
    out["replayed_ns"] = _steps_of(_sweep(topo, base, dropped, "w"), markers, owner, t_node, len(starts))
    for e in edits:
        weighted = base.with_columns(_edited(e, base, pinned_bw, single, copy_bytes).alias("_w"))
        out[f"{e.label}_ns"] = _steps_of(_sweep(topo, weighted, dropped, "_w"), markers, owner, t_node, len(starts))
    return pl.DataFrame(out, schema={**_STEP_SCHEMA, **{f"{e.label}_ns": pl.Int64 for e in edits}})


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
    if e.pin:
        # a pinned copy runs at pinned bandwidth (never slower than it was)
        gpu_bytes = dict(zip(copy_bytes["event_id"].to_list(), copy_bytes["bytes"].to_list(), strict=True))
        pinned = pl.col("event_id").replace_strict(gpu_bytes, default=None, return_dtype=pl.Float64) / pinned_bw
        expr = pl.when((pl.col("kind") == EdgeKind.GPU.value) & (pl.col("tag") == "pageable_memcpy") & pinned.is_not_null()).then(
            pl.min_horizontal(w, pinned)
        ).otherwise(expr)
        if single:
            # no workers: the main thread copies the batch into pinned memory first
            call_bytes = copy_bytes.drop_nulls("launch_id").group_by("launch_id").agg(pl.col("bytes").sum())
            per_call = dict(zip(call_bytes["launch_id"].to_list(), call_bytes["bytes"].to_list(), strict=True))
            host_copy = pl.col("event_id").replace_strict(per_call, default=None, return_dtype=pl.Float64) / HOST_COPY_BW
            last = pl.col("end_ns") == pl.col("end_ns").max().over("event_id")
            expr = pl.when(pl.col("kind").is_in(host_kinds) & host_copy.is_not_null() & last).then(expr + host_copy).otherwise(expr)
    if e.drop_sync:
        expr = pl.when((pl.col("kind") == EdgeKind.SYNC.value) & pl.col("tag").is_in(list(e.drop_sync))).then(None).otherwise(expr)
    return expr.round(0).cast(pl.Int64)


def _order(edges: pl.DataFrame) -> tuple[list[int], set[tuple[int, int]]]:
    """A topological order of the graph, and the edges dropped to break cycles (clock skew)."""
    G = nx.DiGraph()
    G.add_weighted_edges_from(edges.select("src", "dst", "w").iter_rows(), weight="w")
    before = set(G.edges)
    topo, broken = _topological(G)
    dropped = before - set(G.edges) if broken else set()
    return topo, dropped


def _sweep(topo: list[int], edges: pl.DataFrame, dropped: set[tuple[int, int]], col: str) -> dict[int, int]:
    """Every node's replayed offset from the window start: its longest distance from a source.
    Removed edges (null weight) are skipped; a node left without predecessors starts at 0."""
    preds: dict[int, list[tuple[int, int]]] = {}
    for u, v, w in edges.select("src", "dst", col).iter_rows():
        if w is None or (u, v) in dropped:
            continue
        preds.setdefault(v, []).append((u, w))
    dist: dict[int, int] = {}
    for n in topo:
        best = 0
        for u, w in preds.get(n, ()):
            d = dist.get(u, 0) + w
            if d > best:
                best = d
        dist[n] = best
    return dist


def _step_nodes(nodes: pl.DataFrame, edges: pl.DataFrame, starts: list[int]) -> tuple[list[int | None], dict[int, int]]:
    """(the driving thread's node at every step's start, GPU end node → the step that launched it)."""
    first = edges.filter((pl.col("src") == 0) & (pl.col("kind") == EdgeKind.WINDOW.value) & (pl.col("tag") == "cpu"))
    main = nodes.join(first.select(pl.col("dst").alias("node")), on="node", how="semi").filter(pl.col("pid").is_not_null())
    markers: list[int | None] = [None] * len(starts)
    if main.height:
        pid, tid = main["pid"][0], main["tid"][0]
        chain = nodes.filter((pl.col("pid") == pid) & (pl.col("tid") == tid)).sort("t")
        found = pl.DataFrame({"_s": starts}, schema={"_s": pl.Int64}).with_row_index("_k").sort("_s").join_asof(
            chain.select("t", "node"), left_on="_s", right_on="t", strategy="forward"
        ).sort("_k")
        markers = [None if v is None else int(v) for v in found["node"].to_list()]
    launches = edges.filter(pl.col("kind") == EdgeKind.LAUNCH.value).select("dst", "start_ns")
    bounds = pl.DataFrame({"_s": starts}, schema={"_s": pl.Int64}).with_row_index("_k").sort("_s")
    owned = launches.sort("start_ns").join_asof(bounds, left_on="start_ns", right_on="_s", strategy="backward").with_columns(
        pl.col("_k").fill_null(0)
    )
    gpu_ends = nodes.filter(pl.col("is_end").fill_null(False)).select(pl.col("node"), (pl.col("node") - 1).alias("dst"))
    owner = owned.join(gpu_ends, on="dst").select("node", "_k")
    return markers, dict(zip(owner["node"].to_list(), owner["_k"].to_list(), strict=True))


def _steps_of(dist: dict[int, int], markers: list[int | None], owner: Mapping[int, int], t_node: int, n: int) -> list[int | None]:
    """Replayed step durations: step k ends when the host starts step k + 1 and the GPU finished
    what step k launched, whichever is later (the last step: when everything finished)."""
    done = [0] * n
    for node, k in owner.items():
        d = dist.get(node)
        if d is not None and d > done[k]:
            done[k] = d
    start = [None if m is None else dist.get(m) for m in markers]
    bounds: list[int | None] = [start[0] if start[0] is not None else 0]
    for k in range(n):
        nxt = start[k + 1] if k + 1 < n else dist.get(t_node)
        prev = bounds[-1]
        if nxt is None or prev is None:
            bounds.append(None)
            continue
        bounds.append(max(nxt, done[k], prev))
    return [None if a is None or b is None else b - a for a, b in itertools.pairwise(bounds)]


def median(values: Sequence[float]) -> float | None:
    return float(statistics.median(values)) if values else None
