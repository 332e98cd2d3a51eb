"""A drawable model of one step: tracks, events with nesting depth, gaps, sync points.

Renderers (the HTML report's timeline picture, the TUI's timeline screen, the annotated
trace) draw a :class:`StepView`; they never query the raw tables themselves.  Building a
view is vectorised (nesting depth comes from two sorted searches, not a Python stack), and a
view holds at most ``max_events`` events — the longest ones — so a step of a million events
still draws quickly; ``dropped_events`` says how many were left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from ..schema import GPU_KINDS, HOST_KINDS, TraceTables


@dataclass(frozen=True)
class StepView:
    rank: int
    step: int
    start_ns: int
    end_ns: int
    #: track, label, side ("cpu" | "gpu"), order — one row per CPU thread and GPU stream
    tracks: pl.DataFrame
    #: track, event_id, kind, name, start_ns, end_ns, depth
    events: pl.DataFrame
    #: start_ns, end_ns, cause, device (idle gaps of the step's devices)
    gaps: pl.DataFrame
    #: sync points of the step (see tracekit.analysis.syncs)
    syncs: pl.DataFrame
    #: events left out to respect max_events
    dropped_events: int


def representative_step(steps: pl.DataFrame) -> tuple[int, int] | None:
    """(rank, step) of the complete step whose duration is closest to the median."""
    complete = steps.filter(pl.col("complete"))
    if complete.height == 0:
        complete = steps
    if complete.height == 0:
        return None
    median = complete["dur_ns"].median()
    pick = complete.with_columns((pl.col("dur_ns") - median).abs().alias("_d")).sort(["_d", "rank", "step"]).row(0, named=True)
    return int(pick["rank"]), int(pick["step"])


def step_view(
    tables: TraceTables, steps: pl.DataFrame, gaps: pl.DataFrame, syncs: pl.DataFrame, rank: int, step: int, *, max_events: int = 20_000
) -> StepView:
    """The drawable model of (rank, step)."""
    row = steps.filter((pl.col("rank") == rank) & (pl.col("step") == step))
    if row.height == 0:
        raise KeyError(f"no step {step} on rank {rank}")
    w0, w1 = int(row["start_ns"][0]), int(row["end_ns"][0])
    ev = tables.events.filter(
        (pl.col("rank") == rank) & (pl.col("start_ns") < w1) & (pl.col("end_ns") > w0) & (pl.col("dur_ns") > 0)
    )
    cpu = ev.filter(pl.col("kind").is_in(HOST_KINDS) & pl.col("tid").is_not_null()).with_columns(
        pl.format("cpu {}/{}", "pid", "tid").alias("track")
    )
    gpu = ev.filter(pl.col("kind").is_in(GPU_KINDS) & pl.col("device").is_not_null()).with_columns(
        pl.format("gpu {}/{}", "device", pl.col("stream").fill_null(-1)).alias("track")
    )
    both = pl.concat([cpu, gpu])
    dropped = max(0, both.height - max_events)
    if dropped:
        both = both.sort(["dur_ns", "start_ns", "event_id"], descending=[True, False, False], nulls_last=True).head(max_events)
    both = _with_depth(both.select("track", "event_id", "kind", "name", "start_ns", "end_ns"))
    names = _track_labels(tables)
    tracks = (
        both.group_by("track")
        .agg(pl.col("start_ns").min().alias("_first"))
        .with_columns(pl.when(pl.col("track").str.starts_with("gpu")).then(pl.lit("gpu")).otherwise(pl.lit("cpu")).alias("side"))
        .join(names, on="track", how="left")
        .with_columns(pl.coalesce("label", "track").alias("label"))
        .sort(["side", "track"], descending=[False, False])
        .with_row_index("order")
        .select("track", "label", "side", "order")
    )
    step_gaps = gaps.filter((pl.col("rank") == rank) & (pl.col("step") == step)).select("device", "start_ns", "end_ns", "cause")
    step_syncs = syncs.filter((pl.col("rank") == rank) & (pl.col("step") == step))
    return StepView(
        rank=rank, step=step, start_ns=w0, end_ns=w1, tracks=tracks, events=both.sort(["track", "start_ns"]),
        gaps=step_gaps, syncs=step_syncs, dropped_events=dropped,
    )


def _with_depth(events: pl.DataFrame) -> pl.DataFrame:
    """Nesting depth per track: intervals open at an event's start, minus itself.

    Exact for properly nested intervals (a profiler's call stacks); overlapping siblings
    get the depth of the deepest still-open interval.
    """
    if events.height == 0:
        return events.with_columns(pl.lit(0, dtype=pl.Int32).alias("depth"))
    events = events.sort(["track", "start_ns", "end_ns"], descending=[False, False, True])
    started_before = pl.int_range(pl.len()).over("track")
    ended_by_start = pl.col("end_ns").sort().search_sorted(pl.col("start_ns"), side="right").over("track")
    return events.with_columns((started_before - ended_by_start).clip(lower_bound=0).cast(pl.Int32).alias("depth"))


def _track_labels(tables: TraceTables) -> pl.DataFrame:
    th = tables.threads
    cpu = th.filter(pl.col("tid").is_not_null()).select(
        pl.format("cpu {}/{}", "pid", "tid").alias("track"),
        pl.coalesce(
            "thread_name", pl.format("thread {} ({})", "tid", pl.coalesce("process_name", pl.format("pid {}", "pid")))
        ).alias("label"),
    )
    gpu = th.filter(pl.col("stream").is_not_null()).select(
        pl.format("gpu {}/{}", "device", "stream").alias("track"), pl.format("GPU {} stream {}", "device", "stream").alias("label")
    )
    return pl.concat([cpu, gpu]).unique("track", keep="first")
