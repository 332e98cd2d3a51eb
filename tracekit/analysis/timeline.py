"""GPU busy time, idle gaps and the cause of every idle nanosecond.

The GPU timeline of each (rank, device) is split, inside each step window, into:

* busy time (the union of kernels, copies and memsets), labelled by the causes whose GPU
  activities run (:attr:`~tracekit.analysis.causes.Cause.gpu`): ``compute`` when any activity no
  other cause marks runs, else the first of the others (:func:`~tracekit.analysis.causes.gpu_claimants`:
  ``exposed_communication`` when communication kernels run, else ``pageable_memcpy`` when a
  copy from/to pageable host memory runs);
* idle gaps, each attributed by what the host thread that launched the *next* GPU work
  was doing while the GPU waited: the idle causes of :mod:`tracekit.analysis.causes`
  (``IDLE_CAUSES``, in precedence order; what each means is in docs/analysis.md, generated from
  the registry).  Each cause's detector marks host intervals, and its attribution rule
  (:mod:`tracekit.analysis.causes.attribution`) takes its part of the gap: host work in gaps up
  to :data:`LAUNCH_GAP_NS` is ``launch_bound``, longer host work ``cpu_bound``; time nothing
  recorded explains stays ``unattributed``.

Every computation is a polars join or group-by; Python only loops over the few groups
(devices, threads) the inequality joins are run for, and over the causes.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from ..schema import GPU_ACTIVITY_KINDS, LAUNCH_KINDS
from . import causes
from .causes import CAUSES, HOST_CATEGORY_COLUMNS, IDLE_CAUSES, LAUNCH_GAP_NS, LAUNCH_LATENCY_NS, GapParts, HostEvents
from .causes.attribution import OWN_TIME, where
from .causes.detectors import other_host_work
from .classify import is_host_sync
from .intervals import complement, coverage_at, covered_in, union

__all__ = [
    "HOST_CATEGORY_COLUMNS", "LAUNCH_GAP_NS", "LAUNCH_LATENCY_NS", "OTHER_HOST_WORK", "SYNC_SLACK_NS", "Timeline",
    "analyze_timeline", "gpu_activity", "host_categories", "sync_calls",
]

#: a sync call that returned this close before the GPU went idle caused the idle time after it
SYNC_SLACK_NS = 20_000


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

    # --- busy time, labelled by the causes whose activities run: the activities no other cause
    # marks (compute), then each other cause's where no earlier one's run (gpu_claimants' order)
    claimants = causes.gpu_claimants()
    others = [(c.name, pl.any_horizontal([m.where() for m in c.gpu])) for c in claimants if not c.rest_of_gpu]
    marked = pl.any_horizontal([m for _name, m in others]) if others else pl.lit(False)
    v_all = union(gpu, key)
    pool = [gpu.filter(~marked)]
    covered = covered_in(windows, union(pool[0], key), key)
    busy = {c.name: covered for c in claimants if c.rest_of_gpu}
    for i, (name, mark) in enumerate(others):
        pool.append(gpu.filter(mark))
        # with the last cause's activities the pool holds every activity
        now = covered_in(windows, v_all if i == len(others) - 1 else union(pl.concat(pool), key), key)
        busy[name] = now - covered
        covered = now
    per_step = windows.with_columns(
        (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"),
        covered_in(windows, v_all, key).alias("busy_ns"),
        *[v.alias(f"_busy_{name}") for name, v in busy.items()],
    )

    # --- idle gaps and their causes
    gaps = complement(v_all, windows, key, [*key, "step"])
    gaps = gaps.join(windows.select(*key, "step", pl.col("start_ns").alias("_wstart")), on=[*key, "step"], how="left")
    gaps = _attribute(gaps, events, links, gpu)

    idle = gaps.group_by([*key, "step"]).agg([pl.col(f"{c}_ns").sum() for c in IDLE_CAUSES])
    per_step = per_step.join(idle, on=[*key, "step"], how="left").with_columns(
        [pl.col(f"{c}_ns").fill_null(0) for c in IDLE_CAUSES]
    )
    # a cause both busy and idle (communication, pageable copies) has both times
    per_step = per_step.with_columns(
        [(pl.col(f"{n}_ns") + pl.col(f"_busy_{n}") if n in IDLE_CAUSES else pl.col(f"_busy_{n}")).alias(f"{n}_ns") for n in busy]
    ).drop([f"_busy_{n}" for n in busy])
    per_step = per_step.select(
        *key, "step", "start_ns", "end_ns", "dur_ns", "busy_ns", *[f"{c}_ns" for c in CAUSES]
    ).sort([*key, "step"])

    totals = per_step.group_by(key).agg(pl.col("busy_ns").sum()).sort(["rank", "busy_ns", "device"], descending=[False, True, False])
    primary = {int(r): int(d) for r, d in totals.unique("rank", keep="first", maintain_order=True).select("rank", "device").iter_rows()}
    return Timeline(per_step=per_step, gaps=gaps, primary_device=primary)


#: the categories :func:`host_categories` adds after the causes' own: any other host work
OTHER_HOST_WORK = "cpu"


def host_categories(events: pl.DataFrame, links: pl.DataFrame, *, cpu: bool = True) -> dict[str, pl.DataFrame]:
    """Host-thread intervals per category, in precedence order (first match wins): each idle
    cause with a detector (:mod:`tracekit.analysis.causes`), then :data:`OTHER_HOST_WORK` (any
    other host work; left out when ``cpu`` is False).  Each frame has the columns
    :data:`HOST_CATEGORY_COLUMNS`."""
    h = HostEvents.of(events, links)
    found = {c.name: c.detector(h) for c in causes.detected() if c.detector is not None}
    if cpu:
        found[OTHER_HOST_WORK] = other_host_work(h)
    return found


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
    own_names = [c.name for c in causes.detected() if c.ends_sync_wait]
    if own_names:
        named_starts = pl.concat([categories[n].select("pid", "tid", "start_ns") for n in own_names]).select(
            pl.col("pid").alias("host_pid"), pl.col("tid").alias("host_tid"), pl.col("start_ns").alias("_ds")
        ).sort("_ds")
        gaps = gaps.sort("start_ns").join_asof(
            named_starts, left_on="start_ns", right_on="_ds", by=["host_pid", "host_tid"], strategy="forward", check_sortedness=False
        )
    else:
        gaps = gaps.with_columns(pl.lit(None, dtype=pl.Int64).alias("_ds"))
    sync_end = pl.when(pl.col("_after_sync")).then(pl.min_horizontal(pl.col("_h_end"), pl.col("_ds").fill_null(pl.col("_h_end")))).otherwise(pl.col("start_ns"))
    gaps = gaps.with_columns(sync_end.clip(lower_bound=pl.col("start_ns")).alias("_s_end"))
    parts = _gap_parts(gaps, categories)

    # each idle cause takes its part (precedence order: the first to claim a gap's queued part has it)
    cols: dict[str, pl.Series] = {}
    unclaimed = pl.Series([True] * gaps.height, dtype=pl.Boolean)
    for cause in causes.idle_causes():
        rule = cause.rule if cause.rule is not None else OWN_TIME
        value = rule.host_time(parts, cause.name)
        claim = rule.queue(parts, cause.name)
        if claim is not None:
            mine = claim & unclaimed
            unclaimed = unclaimed & ~mine
            value = value + where(mine, parts.queued)
        cols[f"{cause.name}_ns"] = value
    out = gaps.with_columns(value.alias(name) for name, value in cols.items())
    cause_cols = [f"{c}_ns" for c in IDLE_CAUSES]
    out = out.with_columns(
        pl.concat_list(cause_cols).list.arg_max().alias("_top"),
    ).with_columns(pl.col("_top").replace_strict(dict(enumerate(IDLE_CAUSES)), return_dtype=pl.String).alias("cause"))
    return out.select(
        "gap_id", *key, "step", "start_ns", "end_ns", "dur_ns", "cause", "host_pid", "host_tid",
        "next_event_id", "launch_event_id", "sync_event_id", *cause_cols,
    ).sort([*key, "start_ns"])


def _gap_parts(gaps: pl.DataFrame, categories: dict[str, pl.DataFrame]) -> GapParts:
    """What the host thread did in every gap: exclusive time per category (precedence order: the
    first category covering an instant has it) in the sync-induced part [start, _s_end) and in
    the rest of the host-late part [_s_end, _h_end), and the time no category covers."""
    marks = gaps.select(pl.col("host_pid").alias("pid"), pl.col("host_tid").alias("tid"), "start_ns", "_s_end", "_h_end")
    prev_a = prev_b = pl.Series([0] * gaps.height, dtype=pl.Int64)
    pool: list[pl.DataFrame] = []
    in_sync: dict[str, pl.Series] = {}
    rest: dict[str, pl.Series] = {}
    for name, rows in categories.items():
        pool.append(rows.select("pid", "tid", "start_ns", "end_ns"))
        u = union(pl.concat(pool), ["pid", "tid"])
        c0 = coverage_at(marks, u, ["pid", "tid"], "start_ns")
        c1 = coverage_at(marks, u, ["pid", "tid"], "_s_end")
        c2 = coverage_at(marks, u, ["pid", "tid"], "_h_end")
        cov_a = (c1 - c0).clip(lower_bound=0)
        cov_b = (c2 - c1).clip(lower_bound=0)
        in_sync[name] = (cov_a - prev_a).clip(lower_bound=0)
        rest[name] = (cov_b - prev_b).clip(lower_bound=0)
        prev_a, prev_b = cov_a, cov_b
    sync_len = (gaps["_s_end"] - gaps["start_ns"]).clip(lower_bound=0)
    rest_len = (gaps["_h_end"] - gaps["_s_end"]).clip(lower_bound=0)
    return GapParts(
        in_sync=in_sync, rest=rest, other_in_sync=in_sync.pop(OTHER_HOST_WORK), other_rest=rest.pop(OTHER_HOST_WORK),
        untraced_in_sync=(sync_len - prev_a).clip(lower_bound=0), untraced_rest=(rest_len - prev_b).clip(lower_bound=0),
        queued=gaps["_queued_ns"], launch_event_id=gaps["launch_event_id"], marked=categories,
    )


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
