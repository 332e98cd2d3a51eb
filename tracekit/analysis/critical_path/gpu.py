"""The GPU side of a step graph: activities and what held each back (its launch, its stream, a
cross-stream wait), typical launch latency, and the host calls that waited for the GPU."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from ...schema import GPU_ACTIVITY_KINDS, LAUNCH_KINDS, EventKind
from .. import causes, patterns
from ..causes import LAUNCH_LATENCY_NS
from ..classify import is_blocking_call, is_host_wait_row
from .edges import QUEUE_DEPTH, QUEUE_WAIT_NS, STEP_KEY, STREAM_KEY


def gpu_activities(events: pl.DataFrame, links: pl.DataFrame, host: pl.DataFrame) -> pl.DataFrame:
    gpu = events.filter(pl.col("kind").is_in(GPU_ACTIVITY_KINDS) & pl.col("device").is_not_null() & (pl.col("dur_ns") > 0) & pl.col("rank").is_not_null())
    # each activity's tag: the first cause (gpu_claimants' order) whose GPU marks match it, the
    # rest of the GPU's work (compute: its marks in their order) last
    marks = [m for c in causes.gpu_claimants() for m in c.gpu]
    tag: Any = pl.lit(None, dtype=pl.String)
    for m in reversed(marks):
        tag = pl.when(m.where()).then(pl.lit(m.tag)).otherwise(tag)
    launch_of = links.unique("gpu_event_id", keep="first").select(pl.col("gpu_event_id").alias("event_id"), pl.col("launch_event_id").alias("call_id"))
    calls = host.select(pl.col("event_id").alias("call_id"), pl.col("start_ns").alias("launch_ns"), pl.col("pid").alias("call_pid"), pl.col("tid").alias("call_tid"))
    gpu = gpu.select(
        "rank", "device", "stream", "event_id", "start_ns", "end_ns", tag.alias("tag"), (pl.col("kind") != EventKind.KERNEL.value).alias("copy")
    ).with_columns(pl.col("stream").fill_null(-1))
    gpu = gpu.join(launch_of, on="event_id", how="left").join(calls, on="call_id", how="left")
    # the instant the work was handed to the GPU; when a rank records launches, work without
    # one was launched before the capture began (a deep queue carries it over), otherwise
    # only its start is known
    linked = pl.col("launch_ns").is_not_null().any().over("rank")
    before_capture = pl.col("start_ns").min().over("rank") - 1
    unknown = pl.when(linked).then(before_capture).otherwise(pl.col("start_ns"))
    return gpu.with_columns(pl.coalesce(pl.min_horizontal("launch_ns", "start_ns"), unknown).alias("launch_t"))


def owns_call(tag: pl.Expr) -> pl.Expr:
    """Whether an activity's tag is one whose launch edge and whose caller's wait are its own time
    (:attr:`~tracekit.analysis.causes.GpuMark.owns_call`)."""
    tags = [m.tag for c in causes.gpu_claimants() for m in c.gpu if m.owns_call]
    return tag.is_in(pl.Series(tags, dtype=pl.String).implode())


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
        *STEP_KEY, "device", pl.col("stream").alias("_own_stream"), pl.col("event_id").alias("dst_id"), "cs", ready.alias("_p")
    )
    if held.height == 0:
        return pl.DataFrame(schema={**{c: acts.schema[c] for c in STEP_KEY}, "dst_id": pl.Int64, "_x": pl.Int64, "_x_node": pl.Int64, "inferred": pl.Boolean})
    ends = gpu_w.select(*STEP_KEY, "device", "stream", pl.col("ce").alias("_x"), pl.col("n_end").alias("_x_node")).sort("_x")
    # the latest end at or before the start, among other streams: one as-of join per stream of the device
    found = held.join(ends.select(*STEP_KEY, "device", "stream").unique(), on=[*STEP_KEY, "device"]).filter(pl.col("stream") != pl.col("_own_stream"))
    found = found.sort("cs").join_asof(ends, left_on="cs", right_on="_x", by=[*STEP_KEY, "device", "stream"], strategy="backward", check_sortedness=False)
    found = found.filter(pl.col("_x").is_not_null() & (pl.col("_x") > pl.col("_p")))
    return found.select(*STEP_KEY, "dst_id", "_x", "_x_node", pl.lit(True).alias("inferred"))


def activities(
    gpu_w: pl.DataFrame, host_w: pl.DataFrame, cross: pl.DataFrame, launch_node: Callable[[pl.DataFrame], pl.DataFrame]
) -> pl.DataFrame:
    """What held each activity back: its launch (``_c``, its node from ``launch_node``), the
    previous activity on its stream (``_p``), a cross-stream wait (``_x``); the latest of them
    (``_q``) is tight, the others keep a lower bound.  ``_gpu_bound``: the GPU, not the launch,
    held it."""
    acts = gpu_w.sort([*STREAM_KEY, "cs", "event_id"]).with_columns(
        pl.col("ce").shift(1).over(STREAM_KEY).alias("_p"), pl.col("n_end").shift(1).over(STREAM_KEY).alias("_p_node"),
    )
    calls = host_w.select(*STEP_KEY, pl.col("event_id").alias("call_id"), pl.col("cs").alias("_c"), pl.col("pid").alias("_cpid"), pl.col("tid").alias("_ctid"))
    acts = acts.join(calls, on=[*STEP_KEY, "call_id"], how="left")
    acts = launch_node(acts)
    # a launch recorded after its activity started (clock skew) explains nothing
    acts = acts.with_columns(pl.when(pl.col("_c") <= pl.col("cs")).then(pl.col("_c")).otherwise(None).alias("_c"))
    xs = cross.join(gpu_w.select(*STEP_KEY, pl.col("event_id").alias("src_id"), pl.col("ce").alias("_x"), pl.col("n_end").alias("_x_node")), on="src_id").join(
        gpu_w.select(*STEP_KEY, pl.col("event_id").alias("dst_id"), pl.col("cs").alias("_ds")), on=[*STEP_KEY, "dst_id"]
    ).filter(pl.col("_x") <= pl.col("_ds"))
    xs = pl.concat([xs.select(*STEP_KEY, "dst_id", "_x", "_x_node", "inferred"), _inferred_cross(acts, gpu_w)])
    x_best = xs.sort(["_x", "_x_node"], descending=[True, False]).unique([*STEP_KEY, "dst_id"], keep="first").select(
        *STEP_KEY, pl.col("dst_id").alias("event_id"), "_x", "_x_node", pl.col("inferred").alias("_x_inferred")
    )
    acts = acts.join(x_best, on=[*STEP_KEY, "event_id"], how="left")
    q = pl.max_horizontal("_p", "_x")
    acts = acts.with_columns(q.alias("_q"))
    gpu_side = pl.col("_q").is_not_null() & (pl.col("_c").is_null() | (pl.col("_q") > pl.col("_c")))
    return acts.with_columns(gpu_side.alias("_gpu_bound"))


def typical_latency(acts: pl.DataFrame) -> pl.DataFrame:
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


def sync_sources(events: pl.DataFrame, links: pl.DataFrame, host: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    """Every blocking host call and the GPU activity whose completion it waited for.

    Returns call_id, rank, src_id, g_end, tag (``sync``, ``launch`` for a full launch queue, or the
    tag of an activity that owns its call's wait: ``pageable_memcpy``), inferred.
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
    own = gpu.filter(pl.col("call_id").is_not_null() & pl.col("copy")).join(
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
    cands = cands.filter(pl.col("g_end") <= pl.col("c1")).sort(["g_end", "src_id"], descending=[True, False]).unique("call_id", keep="first")
    # the wait for an activity whose cause owns its call (a pageable copy) carries its tag
    owned = own.filter(owns_call(pl.col("tag"))).select("call_id", pl.col("event_id").alias("src_id"), pl.col("tag").alias("_own_tag"))
    cands = cands.join(owned, on=["call_id", "src_id"], how="left")
    queue_ids = calls.filter(pl.col("_queue").fill_null(False)).select("call_id", pl.lit(True).alias("_q")) if "_queue" in calls.columns else None
    cands = cands.join(queue_ids, on="call_id", how="left") if queue_ids is not None else cands.with_columns(pl.lit(None, dtype=pl.Boolean).alias("_q"))
    return cands.select(
        "call_id", pl.col("rank").cast(pl.Int32), "src_id", "g_end",
        pl.when(pl.col("_own_tag").is_not_null()).then(pl.col("_own_tag"))
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


def cross_stream_waits(events: pl.DataFrame, links: pl.DataFrame, host: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
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
