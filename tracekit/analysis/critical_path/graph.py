"""Building the dependency graph of every step window: nodes (instants of threads and streams) and
edges (see the package docstring), in groups of steps so memory stays bounded."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import polars as pl

from ...schema import GPU_ACTIVITY_KINDS, EventKind
from ..timeline import host_categories
from .edges import CHAIN_KEY, STEP_KEY, THREAD_KEY, EdgeKind, conform_edges
from .gpu import activities, cross_stream_waits, gpu_activities, owns_call, sync_sources, typical_latency
from .longest import contract
from .threads import assign_to_windows, host_events, main_threads, relevant_threads, thread_chains, thread_cover


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
        return contract(self.edges)[0]


def build_graph(events: pl.DataFrame, links: pl.DataFrame, steps: pl.DataFrame) -> Graph:
    """The dependency graph of every step window (see the module docstring)."""
    whole = whole_trace(events, links, steps)
    return build_windows(whole, whole.win)


@dataclass(frozen=True)
class _Whole:
    """What the graph of any window depends on across the whole trace."""

    #: rank and start of the events overlapping the windows' overall extent
    events: pl.DataFrame
    #: every window (:func:`_windows`)
    win: pl.DataFrame
    #: host events of the threads that can be on a path (:func:`relevant_threads`)
    host: pl.DataFrame
    gpu: pl.DataFrame
    #: rank → driving thread
    main: pl.DataFrame
    blocking: pl.DataFrame
    cross: pl.DataFrame
    #: the timeline's thread-level categories (category → its spans merged per thread, :func:`thread_cover`)
    categories: dict[str, pl.DataFrame]
    #: operators that dispatched a launch (the direct parent of a launch call), as ``owner``
    dispatchers: pl.DataFrame


#: the columns of the events table the graph is built from (the rest are never copied)
_EVENT_COLUMNS = [
    "event_id", "kind", "name", "rank", "pid", "tid", "device", "stream", "start_ns", "dur_ns", "end_ns", "correlation",
    "src_memory", "dst_memory", "sync_kind", "wait_stream", "wait_event_correlation",
]


def whole_trace(events: pl.DataFrame, links: pl.DataFrame, steps: pl.DataFrame) -> _Whole:
    win = _windows(steps)
    events = events.select(_EVENT_COLUMNS)
    if win.height:
        # only what overlaps a window can be on a path (a single-window call stays cheap);
        # when that is every event, the table is not copied
        near = (pl.col("end_ns") >= win["w0"].min()) & (pl.col("start_ns") <= win["w1"].max())
        if events.select(near.fill_null(False).sum()).item() < events.height:
            events = events.filter(near)
    host = host_events(events, links)
    gpu = gpu_activities(events, links, host)
    main = main_threads(host, events, links)
    host = host.join(relevant_threads(host, main, links), on=["rank", *THREAD_KEY], how="semi")
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
        blocking=sync_sources(events, links, host, gpu),
        cross=cross_stream_waits(events, links, host, gpu),
        # merged once here, not once per group
        categories={cat: thread_cover(spans) for cat, spans in host_categories(events, links, cpu=False).items()},
        dispatchers=dispatchers,
    )


def step_groups(whole: _Whole, batch_events: int) -> list[pl.DataFrame]:
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
    """The host and GPU rows of the windows ``win``, clipped to them (see :func:`assign_to_windows`)."""
    if win.height < whole.win.height:
        near = (pl.col("end_ns") >= win["w0"].min()) & (pl.col("start_ns") <= win["w1"].max())
        return assign_to_windows(whole.host.filter(near), win), assign_to_windows(whole.gpu.filter(near), win)
    return assign_to_windows(whole.host, win), assign_to_windows(whole.gpu, win)


def _number_gpu(gpu_w: pl.DataFrame, base: int) -> pl.DataFrame:
    """Node ids of every activity's start and end, from ``base`` on, and its track name."""
    gpu_w = gpu_w.with_row_index("_g").with_columns(
        (pl.col("_g").cast(pl.Int64) * 2 + base).alias("n_start"), (pl.col("_g").cast(pl.Int64) * 2 + base + 1).alias("n_end")
    ).drop("_g")
    return gpu_w.with_columns(pl.format("gpu {}/{}", "device", pl.col("stream").fill_null(-1)).alias("track"))


def launch_latency(whole: _Whole, groups: list[pl.DataFrame]) -> pl.DataFrame:
    """rank → typical launch latency over every window, when the windows are built in groups
    (one group computes it from its own activities, which are then all of them).

    Only what decides a sample is carried: of the host events, the calls that launched an
    activity (the only rows an activity's launch is looked up in), and of both tables the
    columns :func:`activities` reads; each row is assigned to its windows as in :func:`build_windows`,
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
        acts = activities(gpu_w, host_w, whole.cross, lambda f: f.with_columns(pl.lit(None, dtype=pl.Int64).alias("_c_node")))
        samples.append(acts.filter(~pl.col("_gpu_bound") & pl.col("_c").is_not_null()).select("rank", (pl.col("cs") - pl.col("_c")).alias("_d")))
    return pl.concat(samples).group_by("rank").agg(pl.col("_d").median().cast(pl.Int64).alias("_lat"))


def build_windows(whole: _Whole, win: pl.DataFrame, *, latency: pl.DataFrame | None = None, first_node: int = 0) -> Graph:
    """The graph of the windows ``win`` (all of ``whole.win`` or a group of them), node ids
    from ``first_node`` on; ``latency`` is the whole trace's when ``win`` is a group."""
    host_w, gpu_w = _assigned(whole, win)
    chain = thread_chains(host_w, win, whole.main, whole.categories, whole.dispatchers)
    g = _number_nodes(chain, gpu_w, win, first_node)
    parts: list[pl.DataFrame] = []
    # a helper thread (the autograd engine's) hands work over to the driving thread and back
    helpers = bool(g.chain.select((~pl.col("main")).any()).item())
    if helpers:
        handoff, g = _handoff_edges(g)
        parts.append(handoff)
    parts.append(_chain_edges(g, whole.blocking))
    parts.extend(_gpu_edges(g, host_w, whole.cross, latency))
    parts.append(_sync_edges(g, host_w, whole.blocking))
    if helpers:
        parts.append(_wake_edges(g))
    parts.append(_start_edges(g))
    return _finish(g, pl.concat([conform_edges(p) for p in parts]))


@dataclass(frozen=True)
class _Numbered:
    """A group's windows with a node id for every instant: ``chain`` (every thread's instants,
    each with its node as ``_node``), ``chain_nodes`` (node, rank, step, pid, tid, t, main),
    ``gpu`` (activities with ``n_start``/``n_end`` and their track), ``st`` (each window's S and
    T nodes) and ``win`` (the windows)."""

    chain: pl.DataFrame
    chain_nodes: pl.DataFrame
    gpu: pl.DataFrame
    st: pl.DataFrame
    win: pl.DataFrame

    def node_at(self, frame: pl.DataFrame, pid: str, tid: str, t: str, alias: str) -> pl.DataFrame:
        """``frame`` with the node of the thread instant named by its columns ``pid``, ``tid``, ``t`` as ``alias``."""
        keyed = self.chain_nodes.select(*CHAIN_KEY, "t", "node").rename({"pid": pid, "tid": tid, "t": t, "node": alias})
        return frame.join(keyed, on=["rank", "step", pid, tid, t], how="left")


def _number_nodes(chain: pl.DataFrame, gpu_w: pl.DataFrame, win: pl.DataFrame, first_node: int) -> _Numbered:
    """Node ids: each window's S and T, then every thread instant, then every activity's start and end."""
    # one row per instant, in (rank, step, pid, tid, t) order already (see thread_chains)
    chain_nodes = chain.select(*CHAIN_KEY, "t", "main")
    st = win.select(*STEP_KEY).with_row_index("_w").with_columns(
        (pl.col("_w").cast(pl.Int64) * 2 + first_node).alias("S"), (pl.col("_w").cast(pl.Int64) * 2 + 1 + first_node).alias("T")
    ).drop("_w")
    base = first_node + 2 * win.height
    chain_nodes = chain_nodes.with_row_index("node").with_columns((pl.col("node").cast(pl.Int64) + base).alias("node"))
    # each instant's node travels with its row; the next instant of its thread is the next node
    chain = chain.with_columns(chain_nodes["node"].alias("_node"))
    base += chain_nodes.height
    return _Numbered(chain=chain, chain_nodes=chain_nodes, gpu=_number_gpu(gpu_w, base), st=st, win=win)


def _handoff_edges(g: _Numbered) -> tuple[pl.DataFrame, _Numbered]:
    """The driver waited for a helper: an untraced stretch of the driving thread (no event, or a
    user range's own time) that ends after a helper thread went idle (the main thread blocked in
    backward() while the autograd thread launched the kernels) was a wait for that helper, whose
    last instant hands over to the driver.  Those stretches become waits in the chain."""
    chain = g.chain
    untraced = pl.col("owner").is_null() | (pl.col("_okind") == EventKind.ANNOTATION.value)
    gaps = chain.filter(pl.col("main") & untraced & pl.col("t_next").is_not_null() & (pl.col("tag") == "cpu"))
    idle = chain.filter(~pl.col("main") & pl.col("idles")).select(*STEP_KEY, pl.col("t").alias("_ht"), pl.col("_node").alias("src"))
    handed = gaps.select(*CHAIN_KEY, "t", "t_next", (pl.col("_node") + 1).alias("dst")).sort("t_next").join_asof(
        idle.sort("_ht"), left_on="t_next", right_on="_ht", by=STEP_KEY, strategy="backward", check_sortedness=False
    ).filter(pl.col("_ht").is_not_null() & (pl.col("_ht") > pl.col("t")))
    edges = handed.select(
        *STEP_KEY, "src", "dst", (pl.col("t_next") - pl.col("_ht")).alias("w"), pl.lit(EdgeKind.WAKE.value).alias("kind"),
        pl.lit("cpu").alias("tag"), pl.lit(False).alias("removable"), pl.lit(True).alias("inferred"),
        pl.lit(None, dtype=pl.Int64).alias("event_id"), pl.format("cpu {}/{}", "pid", "tid").alias("track"),
        pl.col("_ht").alias("start_ns"), pl.col("t_next").alias("end_ns"),
    )
    waited_for = handed.select(*CHAIN_KEY, "t").with_columns(pl.lit(True).alias("_handed"))
    chain = chain.join(waited_for, on=[*CHAIN_KEY, "t"], how="left", maintain_order="left").with_columns(
        pl.when(pl.col("_handed").fill_null(False)).then(pl.lit("wait")).otherwise(pl.col("tag")).alias("tag")
    ).drop("_handed")
    return edges, dataclasses.replace(g, chain=chain)


def _chain_edges(g: _Numbered, blocking: pl.DataFrame) -> pl.DataFrame:
    """Consecutive instants of every thread: the stretch's self time (data loading or other
    host work), a wait weighing nothing, and a blocking call's own duration only after the GPU
    work it waited for."""
    segs = g.chain.filter(pl.col("t_next").is_not_null()).with_columns(pl.col("_node").alias("src"), (pl.col("_node") + 1).alias("dst"))
    own = blocking.select("rank", pl.col("call_id").alias("owner"), pl.col("g_end").alias("_g"))
    segs = segs.join(own, on=["rank", "owner"], how="left")
    waited = pl.col("_g").is_not_null() & (pl.col("t_next") == pl.col("_owner_end")) & (pl.col("_g") <= pl.col("t_next"))
    seg_w = pl.when(pl.col("tag") == "wait").then(0).when(waited).then(
        pl.min_horizontal(pl.col("t_next") - pl.col("t"), pl.col("t_next") - pl.col("_g"))
    ).otherwise(pl.col("t_next") - pl.col("t"))
    return segs.select(
        *STEP_KEY, "src", "dst", seg_w.alias("w"),
        pl.when(pl.col("tag") == "data_loading").then(pl.lit(EdgeKind.DATA_LOADING.value)).otherwise(pl.lit(EdgeKind.CPU.value)).alias("kind"),
        "tag", pl.lit(False).alias("removable"), pl.lit(False).alias("inferred"), pl.col("owner").alias("event_id"),
        # a thread stretch's track is formatted only if it ends up on the path (there are many)
        pl.lit(None, dtype=pl.String).alias("track"), "pid", "tid", pl.col("t").alias("start_ns"), pl.col("t_next").alias("end_ns"),
    )


def _gpu_edges(g: _Numbered, host_w: pl.DataFrame, cross: pl.DataFrame, latency: pl.DataFrame | None) -> list[pl.DataFrame]:
    """Every activity's run, and what held it back: its launch (the full delay when it waited
    for the launch, the typical latency when its stream held it), the previous activity on its
    stream, a cross-stream wait, or the step's start for work launched before the step."""
    gpu_w = g.gpu
    run = gpu_w.select(
        *STEP_KEY, pl.col("n_start").alias("src"), pl.col("n_end").alias("dst"), (pl.col("ce") - pl.col("cs")).alias("w"),
        pl.lit(EdgeKind.GPU.value).alias("kind"), "tag", pl.lit(False).alias("removable"), pl.lit(False).alias("inferred"),
        "event_id", "track", pl.col("cs").alias("start_ns"), pl.col("ce").alias("end_ns"),
    )
    acts = activities(gpu_w, host_w, cross, lambda f: g.node_at(f, "_cpid", "_ctid", "_c", "_c_node"))
    lat = typical_latency(acts) if latency is None else latency
    acts = acts.join(lat, on="rank", how="left").with_columns(pl.col("_lat").fill_null(0))
    launch_w = pl.when(pl.col("_gpu_bound")).then(pl.min_horizontal(pl.col("cs") - pl.col("_c"), pl.col("_lat"))).otherwise(pl.col("cs") - pl.col("_c"))
    launch_tag = pl.when(owns_call(pl.col("tag"))).then(pl.col("tag")).otherwise(pl.lit("launch"))
    launch = acts.filter(pl.col("_c").is_not_null() & pl.col("_c_node").is_not_null()).select(
        *STEP_KEY, pl.col("_c_node").alias("src"), pl.col("n_start").alias("dst"), launch_w.alias("w"),
        pl.lit(EdgeKind.LAUNCH.value).alias("kind"), launch_tag.alias("tag"), pl.lit(False).alias("removable"),
        pl.lit(False).alias("inferred"), pl.col("call_id").alias("event_id"), "track", pl.col("_c").alias("start_ns"),
        pl.col("cs").alias("end_ns"),
    )
    tight_p = pl.col("_gpu_bound") & (pl.col("_p") == pl.col("_q"))
    stream = acts.filter(pl.col("_p").is_not_null()).select(
        *STEP_KEY, pl.col("_p_node").alias("src"), pl.col("n_start").alias("dst"),
        # activities that overlap on a stream (µs rounding) get a negative weight, never a gain
        pl.when(tight_p).then(pl.col("cs") - pl.col("_p")).otherwise(pl.min_horizontal(pl.lit(0), pl.col("cs") - pl.col("_p"))).alias("w"),
        pl.lit(EdgeKind.STREAM.value).alias("kind"), pl.lit("launch").alias("tag"), pl.lit(False).alias("removable"),
        pl.lit(False).alias("inferred"), pl.lit(None, dtype=pl.Int64).alias("event_id"), "track",
        pl.col("_p").alias("start_ns"), pl.col("cs").alias("end_ns"),
    )
    tight_x = pl.col("_gpu_bound") & (pl.col("_x") == pl.col("_q"))
    crossed = acts.filter(pl.col("_x").is_not_null()).select(
        *STEP_KEY, pl.col("_x_node").alias("src"), pl.col("n_start").alias("dst"),
        pl.when(tight_x).then(pl.col("cs") - pl.col("_x")).otherwise(0).alias("w"),
        pl.lit(EdgeKind.CROSS_STREAM.value).alias("kind"), pl.lit("launch").alias("tag"), pl.lit(False).alias("removable"),
        pl.col("_x_inferred").alias("inferred"), pl.lit(None, dtype=pl.Int64).alias("event_id"), "track",
        pl.col("_x").alias("start_ns"), pl.col("cs").alias("end_ns"),
    )
    # work launched before the step (or by nothing recorded) that starts inside it
    orphans = acts.filter(pl.col("_q").is_null() & (pl.col("_c").is_null() | pl.col("_c_node").is_null()))
    from_start = orphans.join(g.st, on=STEP_KEY).join(g.win.select(*STEP_KEY, "w0"), on=STEP_KEY).select(
        *STEP_KEY, pl.col("S").alias("src"), pl.col("n_start").alias("dst"), (pl.col("cs") - pl.col("w0")).alias("w"),
        pl.lit(EdgeKind.WINDOW.value).alias("kind"), pl.lit("launch").alias("tag"), pl.lit(False).alias("removable"),
        pl.lit(False).alias("inferred"), pl.lit(None, dtype=pl.Int64).alias("event_id"), "track",
        pl.col("w0").alias("start_ns"), pl.col("cs").alias("end_ns"),
    )
    return [run, launch, stream, crossed, from_start]


def _sync_edges(g: _Numbered, host_w: pl.DataFrame, blocking: pl.DataFrame) -> pl.DataFrame:
    """GPU → host: the end of the activity a blocking call waited for → the call's end."""
    sync = blocking.join(
        host_w.select(*STEP_KEY, pl.col("event_id").alias("call_id"), "pid", "tid", pl.col("cs").alias("_c0"), pl.col("ce").alias("_c1"), pl.col("end_ns").alias("_true_end")),
        on=["rank", "call_id"],
    )
    sync = sync.join(g.gpu.select(*STEP_KEY, pl.col("event_id").alias("src_id"), pl.col("ce").alias("_g_ce"), "n_end"), on=[*STEP_KEY, "src_id"])
    # the call's end may be cut by the window's end; the wait still ends there
    sync = sync.filter((pl.col("_g_ce") == pl.col("g_end")) & (pl.col("g_end") <= pl.col("_c1")))
    sync = g.node_at(sync, "pid", "tid", "_c1", "dst")
    return sync.filter(pl.col("dst").is_not_null()).select(
        *STEP_KEY, pl.col("n_end").alias("src"), "dst",
        pl.min_horizontal(pl.col("_c1") - pl.col("_c0"), pl.col("_c1") - pl.col("g_end")).alias("w"),
        # a wait on a full launch queue is not a sync the user can remove
        pl.lit(EdgeKind.SYNC.value).alias("kind"), "tag", (pl.col("tag") != "launch").alias("removable"), "inferred",
        pl.col("call_id").alias("event_id"), pl.format("cpu {}/{}", "pid", "tid").alias("track"),
        pl.col("g_end").alias("start_ns"), pl.col("_c1").alias("end_ns"),
    )


def _wake_edges(g: _Numbered) -> pl.DataFrame:
    """Another thread resuming work: the driving thread's last instant before it (or the step's start)."""
    first = g.chain.filter(~pl.col("main") & pl.col("resumes")).select(*CHAIN_KEY, "t", pl.col("_node").alias("dst"))
    mains = g.chain_nodes.filter(pl.col("main")).select(
        *STEP_KEY, pl.col("t").alias("_mt"), pl.col("node").alias("_mnode"), pl.col("pid").alias("_mpid"), pl.col("tid").alias("_mtid")
    ).sort("_mt")
    woken = first.sort("t").join_asof(mains, left_on="t", right_on="_mt", by=STEP_KEY, strategy="backward", allow_exact_matches=False, check_sortedness=False)
    woken = woken.join(g.st, on=STEP_KEY).join(g.win.select(*STEP_KEY, "w0"), on=STEP_KEY)
    return woken.select(
        *STEP_KEY, pl.coalesce("_mnode", "S").alias("src"), "dst", (pl.col("t") - pl.coalesce("_mt", "w0")).alias("w"),
        pl.lit(EdgeKind.WAKE.value).alias("kind"), pl.lit("cpu").alias("tag"), pl.lit(False).alias("removable"),
        pl.lit(True).alias("inferred"), pl.lit(None, dtype=pl.Int64).alias("event_id"),
        pl.format("cpu {}/{}", "pid", "tid").alias("track"), pl.coalesce("_mt", "w0").alias("start_ns"), pl.col("t").alias("end_ns"),
    )


def _start_edges(g: _Numbered) -> pl.DataFrame:
    """S → the driving thread's first instant of each window."""
    main_first = g.chain_nodes.filter(pl.col("main")).sort("t").unique(STEP_KEY, keep="first").join(g.st, on=STEP_KEY).join(
        g.win.select(*STEP_KEY, "w0"), on=STEP_KEY
    )
    return main_first.select(
        *STEP_KEY, pl.col("S").alias("src"), pl.col("node").alias("dst"), (pl.col("t") - pl.col("w0")).alias("w"),
        pl.lit(EdgeKind.WINDOW.value).alias("kind"), pl.lit("cpu").alias("tag"), pl.lit(False).alias("removable"),
        pl.lit(False).alias("inferred"), pl.lit(None, dtype=pl.Int64).alias("event_id"),
        pl.format("cpu {}/{}", "pid", "tid").alias("track"), pl.col("w0").alias("start_ns"), pl.col("t").alias("end_ns"),
    )


def _finish(g: _Numbered, edges: pl.DataFrame) -> Graph:
    """The graph: every node without a successor finishes into T, one edge per node pair, S and T as nodes."""
    edges = edges.filter(pl.col("src").is_not_null() & pl.col("dst").is_not_null())
    gpu_w, st, win = g.gpu, g.st, g.win
    nodes = pl.concat(
        [
            g.chain_nodes.select("node", *STEP_KEY, "t", "pid", "tid"),
            gpu_w.select(pl.col("n_start").alias("node"), *STEP_KEY, pl.col("cs").alias("t"), "track", "event_id", pl.lit(False).alias("is_end")),
            gpu_w.select(pl.col("n_end").alias("node"), *STEP_KEY, pl.col("ce").alias("t"), "track", "event_id", pl.lit(True).alias("is_end")),
        ],
        how="diagonal_relaxed",
    )
    sinks = nodes.join(edges.select(pl.col("src").alias("node")).unique(), on="node", how="anti").join(st, on=STEP_KEY).join(
        win.select(*STEP_KEY, "w1"), on=STEP_KEY
    )
    t_edges = sinks.select(
        *STEP_KEY, pl.col("node").alias("src"), pl.col("T").alias("dst"), pl.lit(0, dtype=pl.Int64).alias("w"),
        pl.lit(EdgeKind.WINDOW.value).alias("kind"), pl.lit("cpu").alias("tag"), pl.lit(False).alias("removable"),
        pl.lit(False).alias("inferred"), pl.lit(None, dtype=pl.Int64).alias("event_id"), "track", "pid", "tid",
        pl.col("t").alias("start_ns"), pl.col("t").alias("end_ns"),
    )
    edges = pl.concat([edges, conform_edges(t_edges)])
    # one edge per node pair: only GPU → GPU edges can repeat one (a stream predecessor that is
    # also the cross-stream source); keep the tightest
    gpu_pairs = pl.col("kind").is_in([EdgeKind.STREAM.value, EdgeKind.CROSS_STREAM.value])
    twice = edges.filter(gpu_pairs).sort(["src", "dst", "w"], descending=[False, False, True]).unique(["src", "dst"], keep="first")
    edges = pl.concat([edges.filter(~gpu_pairs), twice])
    st_nodes = st.unpivot(index=STEP_KEY, on=["S", "T"], variable_name="_which", value_name="node").join(win.select(*STEP_KEY, "w0", "w1"), on=STEP_KEY)
    nodes = pl.concat(
        [nodes, st_nodes.select("node", *STEP_KEY, pl.when(pl.col("_which") == "S").then(pl.col("w0")).otherwise(pl.col("w1")).alias("t"))],
        how="diagonal_relaxed",
    )
    return Graph(nodes=nodes, edges=edges, windows=win.select(*STEP_KEY, "complete", pl.col("w0").alias("start_ns"), pl.col("w1").alias("end_ns")))


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
