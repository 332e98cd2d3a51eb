"""GPU busy time, idle gaps and the cause of every idle nanosecond.

The GPU timeline of each (rank, device) is split, inside each step window, into:

* busy time (the union of kernels, copies and memsets), labelled ``compute``, or
  ``exposed_communication`` when only communication kernels run, or ``pageable_memcpy``
  when only a copy from/to pageable host memory runs;
* idle gaps, each attributed by what the host thread that launched the *next* GPU work
  was doing while the GPU waited: the idle causes of :mod:`tracekit.analysis.causes`
  (``IDLE_CAUSES``, in priority order; what each means is in docs/analysis.md, generated from
  the registry).  Host work in gaps up to :data:`LAUNCH_GAP_NS` is ``launch_bound``, longer
  host work ``cpu_bound``; time nothing recorded explains stays ``unattributed``.

Every computation is a polars join or group-by; Python only loops over the few groups
(devices, threads) the inequality joins are run for.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from ..schema import GPU_ACTIVITY_KINDS, LAUNCH_KINDS, EventKind
from . import patterns
from .causes import CAUSES, IDLE_CAUSES
from .classify import is_api_call, is_data_dependent_op, is_host_sync
from .intervals import complement, coverage_at, covered_in, enclosing, union

#: idle gaps up to this long, filled by op dispatch and launch calls, are launch overhead
LAUNCH_GAP_NS = 100_000
#: queued work that starts within this long after the GPU went idle: launch latency
LAUNCH_LATENCY_NS = 50_000
#: a sync call that returned this close before the GPU went idle caused the idle time after it
SYNC_SLACK_NS = 20_000

_CPU_WORK = [
    EventKind.CPU_OP.value,
    EventKind.ANNOTATION.value,
    EventKind.PYTHON.value,
    EventKind.RUNTIME.value,
    EventKind.DRIVER.value,
]


@dataclass(frozen=True)
class Timeline:
    """Busy/idle accounting of every step on every device."""

    #: rank, device, step, start_ns, end_ns, dur_ns, busy_ns, one ``<cause>_ns`` column per CAUSES
    per_step: pl.DataFrame
    #: rank, device, step, start_ns, end_ns, dur_ns, cause, host_pid, host_tid, next_event_id,
    #: launch_event_id, sync_event_id, and ``<cause>_ns`` for the idle causes
    gaps: pl.DataFrame
    #: rank → device with the most busy time (the breakdown's device)
    primary_device: dict[int, int]


def gpu_activity(events: pl.DataFrame) -> pl.DataFrame:
    return events.filter(pl.col("kind").is_in(GPU_ACTIVITY_KINDS) & pl.col("device").is_not_null() & (pl.col("dur_ns") > 0))


_GPU_COLUMNS = ["event_id", "kind", "name", "rank", "device", "start_ns", "dur_ns", "end_ns", "src_memory", "dst_memory"]


def analyze_timeline(events: pl.DataFrame, links: pl.DataFrame, steps: pl.DataFrame) -> Timeline:
    """Busy time by label and idle gaps by cause, per (rank, device, step)."""
    # only the columns the accounting reads (not a copy of every column of every GPU row)
    gpu = gpu_activity(events.select(_GPU_COLUMNS))
    key = ["rank", "device"]
    devices = gpu.select(key).unique().sort(key)
    windows = steps.join(devices, on="rank", how="inner").select(*key, "step", "start_ns", "end_ns")
    if windows.height == 0:
        return Timeline(per_step=_empty_per_step(), gaps=_empty_gaps(), primary_device={})

    # --- busy time, labelled by priority: compute > communication-only > pageable copy
    is_comm = (pl.col("kind") == EventKind.KERNEL.value) & pl.col("name").str.contains(patterns.COMM_KERNEL)
    is_pageable = (pl.col("kind") == EventKind.MEMCPY.value) & (
        (pl.col("src_memory") == "pageable") | (pl.col("dst_memory") == "pageable")
    )
    compute_rows = gpu.filter(~is_comm & ~is_pageable)
    comm_rows = gpu.filter(is_comm)
    v_compute = union(compute_rows, key)
    v_comm = union(pl.concat([compute_rows, comm_rows]), key)
    v_all = union(gpu, key)
    cov_compute = covered_in(windows, v_compute, key)
    cov_comm = covered_in(windows, v_comm, key)
    cov_all = covered_in(windows, v_all, key)
    per_step = windows.with_columns(
        (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"),
        cov_all.alias("busy_ns"),
        cov_compute.alias("compute_ns"),
        (cov_comm - cov_compute).alias("_comm_busy_ns"),
        (cov_all - cov_comm).alias("_pageable_busy_ns"),
    )

    # --- idle gaps and their causes
    gaps = complement(v_all, windows, key, [*key, "step"])
    gaps = gaps.join(windows.select(*key, "step", pl.col("start_ns").alias("_wstart")), on=[*key, "step"], how="left")
    gaps = _attribute(gaps, events, links, gpu)

    idle = gaps.group_by([*key, "step"]).agg([pl.col(f"{c}_ns").sum() for c in IDLE_CAUSES])
    per_step = per_step.join(idle, on=[*key, "step"], how="left").with_columns(
        [pl.col(f"{c}_ns").fill_null(0) for c in IDLE_CAUSES]
    )
    per_step = per_step.with_columns(
        (pl.col("exposed_communication_ns") + pl.col("_comm_busy_ns")).alias("exposed_communication_ns"),
        (pl.col("pageable_memcpy_ns") + pl.col("_pageable_busy_ns")).alias("pageable_memcpy_ns"),
    ).drop("_comm_busy_ns", "_pageable_busy_ns")
    per_step = per_step.select(
        *key, "step", "start_ns", "end_ns", "dur_ns", "busy_ns", *[f"{c}_ns" for c in CAUSES]
    ).sort([*key, "step"])

    totals = per_step.group_by(key).agg(pl.col("busy_ns").sum()).sort(["rank", "busy_ns", "device"], descending=[False, True, False])
    primary = {int(r): int(d) for r, d in totals.unique("rank", keep="first", maintain_order=True).select("rank", "device").iter_rows()}
    return Timeline(per_step=per_step, gaps=gaps, primary_device=primary)


#: the columns of the events table that :func:`host_categories` reads (its frames carry only
#: these: a copy of every host event's other columns would cost more memory than the analysis)
HOST_CATEGORY_COLUMNS = ["event_id", "kind", "name", "rank", "pid", "tid", "start_ns", "dur_ns", "end_ns", "sync_kind"]


def host_categories(events: pl.DataFrame, links: pl.DataFrame, *, cpu: bool = True) -> dict[str, pl.DataFrame]:
    """Host-thread intervals per category, in priority order (first match wins): the idle
    causes a host thread can be seen doing, then ``cpu`` (any other host work; left out
    when ``cpu`` is False).  Each frame has the columns :data:`HOST_CATEGORY_COLUMNS`."""
    host = events.select(HOST_CATEGORY_COLUMNS).filter(pl.col("tid").is_not_null() & pl.col("pid").is_not_null() & (pl.col("dur_ns") > 0))
    name = pl.col("name")
    not_step = ~name.str.contains(patterns.PROFILER_STEP) & ~name.str.contains(patterns.USER_STEP)
    data = host.filter(pl.col("kind").is_in([EventKind.ANNOTATION.value, EventKind.CPU_OP.value, EventKind.PYTHON.value]) & name.str.contains(patterns.DATALOADER) & not_step)
    # copy calls whose GPU copy touches pageable memory
    pageable_copies = events.select("event_id", "kind", "src_memory", "dst_memory").filter(
        (pl.col("kind") == EventKind.MEMCPY.value) & ((pl.col("src_memory") == "pageable") | (pl.col("dst_memory") == "pageable"))
    )
    pageable_calls = links.join(pageable_copies.select(pl.col("event_id").alias("gpu_event_id")), on="gpu_event_id", how="semi")
    pageable = host.join(pageable_calls.select(pl.col("launch_event_id").alias("event_id")).unique(), on="event_id", how="semi")
    pageable = _without_data_dependent(pageable, host)
    # the user-level operator around the copy call (.to(device) → aten::to) is part of the copy's cost
    if pageable.height:
        ops = host.filter(pl.col("kind") == EventKind.CPU_OP.value)
        outer = enclosing(pageable, ops, "_outer", outermost=True)
        if outer.height:
            ids = pageable.with_row_index("_p").join(outer, on="_p").select(pl.col("_outer").alias("event_id")).unique()
            pageable = pl.concat([pageable, host.join(ids, on="event_id", how="semi")]).unique("event_id")
    sync = host.filter(is_host_sync())
    alloc = host.filter(is_api_call() & name.str.contains(patterns.ALLOCATOR_API))
    comm = host.filter(pl.col("kind").is_in([EventKind.CPU_OP.value, EventKind.ANNOTATION.value]) & name.str.contains(patterns.COMM_OP))
    found = {
        "data_loading": data,
        "pageable_memcpy": pageable,
        "host_device_sync": sync,
        "allocator": alloc,
        "exposed_communication": comm,
    }
    if cpu:
        found["cpu"] = host.filter(pl.col("kind").is_in(_CPU_WORK) & not_step)
    return found


def _without_data_dependent(copies: pl.DataFrame, host: pl.DataFrame) -> pl.DataFrame:
    """Drop copy calls made inside a data-dependent operator (``.item()``, ``.tolist()``,
    ``nonzero``): the host asked for a value and waits for it, which is a host-device sync,
    not a pinning problem; pinned memory would not remove the wait."""
    if copies.height == 0:
        return copies
    dependent = host.filter(is_data_dependent_op())
    if dependent.height == 0:
        return copies
    inside = enclosing(copies, dependent, "_dd", outermost=True)
    if inside.height == 0:
        return copies
    return copies.with_row_index("_p").join(inside.select("_p"), on="_p", how="anti").drop("_p")


def sync_calls(events: pl.DataFrame) -> pl.DataFrame:
    """Host calls that wait for the GPU (used to decide whether a gap followed a sync)."""
    return events.filter(pl.col("pid").is_not_null() & is_host_sync())


def _attribute(gaps: pl.DataFrame, events: pl.DataFrame, links: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    if gaps.height == 0:
        return _empty_gaps()
    key = ["rank", "device"]
    gaps = gaps.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns")).with_row_index("gap_id")

    # the GPU work that ended each gap, and the call that launched it
    nxt = gpu.select(*key, pl.col("start_ns").alias("_next_start"), pl.col("event_id").alias("next_event_id")).sort("_next_start")
    gaps = gaps.sort("end_ns").join_asof(nxt, left_on="end_ns", right_on="_next_start", by=key, strategy="forward", check_sortedness=False)
    launch_of = links.unique("gpu_event_id", keep="first").select("gpu_event_id", "launch_event_id")
    launch_rows = events.select(
        pl.col("event_id").alias("launch_event_id"), pl.col("pid").alias("_lpid"), pl.col("tid").alias("_ltid"), pl.col("start_ns").alias("_lstart")
    )
    gaps = gaps.join(launch_of, left_on="next_event_id", right_on="gpu_event_id", how="left").join(launch_rows, on="launch_event_id", how="left")

    # fallback host thread: the thread of each rank that issued the most launch calls
    main = (
        events.select("kind", "rank", "pid", "tid").filter(pl.col("kind").is_in(LAUNCH_KINDS) & pl.col("tid").is_not_null())
        .group_by("rank", "pid", "tid")
        .len()
        .sort(["rank", "len", "pid", "tid"], descending=[False, True, False, False])
        .unique("rank", keep="first")
        .select("rank", pl.col("pid").alias("_mpid"), pl.col("tid").alias("_mtid"))
    )
    if main.height == 0:
        cpu_threads = (
            events.select("rank", "pid", "tid").filter(pl.col("tid").is_not_null()).group_by("rank", "pid", "tid").len()
            .sort(["rank", "len", "pid", "tid"], descending=[False, True, False, False]).unique("rank", keep="first")
            .select("rank", pl.col("pid").alias("_mpid"), pl.col("tid").alias("_mtid"))
        )
        main = cpu_threads
    gaps = gaps.join(main, on="rank", how="left").with_columns(
        pl.coalesce("_lpid", "_mpid").alias("host_pid"), pl.coalesce("_ltid", "_mtid").alias("host_tid")
    )
    # host-late part [start, min(end, launch)] and queued part [max(start, launch), end]
    launch_at = pl.col("_lstart").clip(lower_bound=pl.col("start_ns"), upper_bound=pl.col("end_ns"))
    gaps = gaps.with_columns(
        pl.when(pl.col("_lstart").is_null()).then(pl.col("end_ns")).otherwise(launch_at).alias("_h_end"),
    ).with_columns((pl.col("end_ns") - pl.col("_h_end")).alias("_queued_ns"))

    # did the host stop feeding the GPU because it was waiting for it?
    syncs = sync_calls(events).select(pl.col("pid").alias("host_pid"), pl.col("start_ns").alias("_ss"), pl.col("end_ns").alias("_se"), pl.col("event_id").alias("sync_event_id")).sort("_ss")
    gaps = gaps.sort("start_ns").join_asof(
        syncs, left_on="start_ns", right_on="_ss", by="host_pid", strategy="backward", check_sortedness=False
    ).with_columns(
        (
            pl.col("_se").is_not_null()
            & (pl.col("_se") >= pl.col("start_ns") - SYNC_SLACK_NS)
            # a sync explains idle time in its own step only: the next step is new work
            & (pl.col("_se") >= pl.col("_wstart"))
        ).alias("_after_sync")
    )
    gaps = gaps.with_columns(pl.when(pl.col("_after_sync")).then(pl.col("sync_event_id")).otherwise(None).alias("sync_event_id"))

    # A sync explains the idle time after it only until the host turns to something with
    # its own name (a data-loading range): split the host-late part at that point.
    categories = host_categories(events, links)
    data_starts = categories["data_loading"].select(
        pl.col("pid").alias("host_pid"), pl.col("tid").alias("host_tid"), pl.col("start_ns").alias("_ds")
    ).sort("_ds")
    gaps = gaps.sort("start_ns").join_asof(
        data_starts, left_on="start_ns", right_on="_ds", by=["host_pid", "host_tid"], strategy="forward", check_sortedness=False
    )
    sync_end = pl.when(pl.col("_after_sync")).then(pl.min_horizontal(pl.col("_h_end"), pl.col("_ds").fill_null(pl.col("_h_end")))).otherwise(pl.col("start_ns"))
    gaps = gaps.with_columns(sync_end.clip(lower_bound=pl.col("start_ns")).alias("_s_end"))

    # what the host thread did: exclusive time per category, in the sync-induced part
    # [start, _s_end) and in the rest [_s_end, _h_end)
    marks = gaps.select(pl.col("host_pid").alias("pid"), pl.col("host_tid").alias("tid"), "start_ns", "_s_end", "_h_end")
    prev_a = prev_b = pl.Series([0] * gaps.height, dtype=pl.Int64)
    pool: list[pl.DataFrame] = []
    exclusive: dict[str, pl.Series] = {}
    in_sync_part: dict[str, pl.Series] = {}
    for name, rows in categories.items():
        pool.append(rows.select("pid", "tid", "start_ns", "end_ns"))
        u = union(pl.concat(pool), ["pid", "tid"])
        c0 = coverage_at(marks, u, ["pid", "tid"], "start_ns")
        c1 = coverage_at(marks, u, ["pid", "tid"], "_s_end")
        c2 = coverage_at(marks, u, ["pid", "tid"], "_h_end")
        cov_a = (c1 - c0).clip(lower_bound=0)
        cov_b = (c2 - c1).clip(lower_bound=0)
        in_sync_part[name] = (cov_a - prev_a).clip(lower_bound=0)
        exclusive[name] = (cov_b - prev_b).clip(lower_bound=0)
        prev_a, prev_b = cov_a, cov_b
    sync_len = (gaps["_s_end"] - gaps["start_ns"]).clip(lower_bound=0)
    rest_len = (gaps["_h_end"] - gaps["_s_end"]).clip(lower_bound=0)
    uncovered_sync = (sync_len - prev_a).clip(lower_bound=0)
    uncovered_rest = (rest_len - prev_b).clip(lower_bound=0)

    def both(name: str) -> pl.Series:
        total: pl.Series = in_sync_part[name] + exclusive[name]
        return total

    cpu = exclusive["cpu"]
    short = cpu <= LAUNCH_GAP_NS
    queued = gaps["_queued_ns"]
    # the wait between a call and the GPU starting its work belongs to the call's own cause
    queued_pageable = gaps["launch_event_id"].is_in(categories["pageable_memcpy"]["event_id"].implode()).fill_null(False)
    queued_short = (queued <= LAUNCH_LATENCY_NS) & ~queued_pageable

    def where(mask: pl.Series, value: pl.Series) -> pl.Series:
        return pl.select(pl.when(pl.lit(mask)).then(pl.lit(value)).otherwise(0)).to_series()

    out = gaps.with_columns(
        both("data_loading").alias("data_loading_ns"),
        (both("pageable_memcpy") + where(queued_pageable, queued)).alias("pageable_memcpy_ns"),
        (both("host_device_sync") + in_sync_part["cpu"] + uncovered_sync).alias("host_device_sync_ns"),
        both("allocator").alias("allocator_ns"),
        both("exposed_communication").alias("exposed_communication_ns"),
        (where(short, cpu) + where(queued_short, queued)).alias("launch_bound_ns"),
        where(~short, cpu).alias("cpu_bound_ns"),
        (uncovered_rest + where(~queued_short & ~queued_pageable, queued)).alias("unattributed_ns"),
    )
    cause_cols = [f"{c}_ns" for c in IDLE_CAUSES]
    out = out.with_columns(
        pl.concat_list(cause_cols).list.arg_max().alias("_top"),
    ).with_columns(pl.col("_top").replace_strict(dict(enumerate(IDLE_CAUSES)), return_dtype=pl.String).alias("cause"))
    return out.select(
        "gap_id", *key, "step", "start_ns", "end_ns", "dur_ns", "cause", "host_pid", "host_tid",
        "next_event_id", "launch_event_id", "sync_event_id", *cause_cols,
    ).sort([*key, "start_ns"])


def _empty_per_step() -> pl.DataFrame:
    schema = {"rank": pl.Int32, "device": pl.Int32, "step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "dur_ns": pl.Int64, "busy_ns": pl.Int64}
    schema.update({f"{c}_ns": pl.Int64 for c in CAUSES})
    return pl.DataFrame(schema=schema)


def _empty_gaps() -> pl.DataFrame:
    schema: dict[str, pl.DataType | type[pl.DataType]] = {
        "gap_id": pl.UInt32, "rank": pl.Int32, "device": pl.Int32, "step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64,
        "dur_ns": pl.Int64, "cause": pl.String, "host_pid": pl.Int64, "host_tid": pl.Int64, "next_event_id": pl.Int64,
        "launch_event_id": pl.Int64, "sync_event_id": pl.Int64,
    }
    schema.update({f"{c}_ns": pl.Int64 for c in IDLE_CAUSES})
    return pl.DataFrame(schema=schema)
