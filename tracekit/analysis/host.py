"""CPU-only traces: where the training thread's step time goes when no GPU was recorded.

A trace without GPU activity (a CPU training run, or a capture on a machine without a GPU)
has no device timeline to find idle gaps in.  The training thread *is* the device: each
step window is split into the time that thread spent inside data-loading ranges (DataLoader
fetches, collate, ``tracekit.data_loading``: :data:`patterns.DATALOADER`) and the rest,
counted as ``compute``.  Rows have the shape of :attr:`Timeline.per_step` (device ``-1``,
``busy_ns`` null: there is no GPU to be busy) so the findings code reads them unchanged.
"""

from __future__ import annotations

import polars as pl

from ..schema import EventKind
from . import patterns
from .causes import CAUSES, IDLE_CAUSES
from .intervals import clip_to_windows, covered_in, union

#: the device id of host-only rows
HOST_DEVICE = -1


def main_threads(events: pl.DataFrame) -> pl.DataFrame:
    """The training thread of each rank: the one holding the most operator and range events."""
    kinds = [EventKind.CPU_OP.value, EventKind.ANNOTATION.value]
    return (
        events.filter(pl.col("kind").is_in(kinds) & pl.col("tid").is_not_null() & pl.col("pid").is_not_null())
        .group_by("rank", "pid", "tid")
        .len()
        .sort(["rank", "len", "pid", "tid"], descending=[False, True, False, False])
        .unique("rank", keep="first", maintain_order=True)
        .select("rank", "pid", "tid")
    )


def host_breakdown(events: pl.DataFrame, steps: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(per-step rows, data-loading stretches) for a trace with no GPU activity.

    ``per_step`` has the columns of :attr:`Timeline.per_step`; ``gaps`` those of
    :attr:`Timeline.gaps`, one row per stretch of a step the training thread spent loading
    data (cause ``data_loading``).
    """
    windows = steps.select("rank", "step", "start_ns", "end_ns").sort("rank", "step")
    threads = main_threads(events)
    name = pl.col("name")
    data_kinds = [EventKind.ANNOTATION.value, EventKind.CPU_OP.value, EventKind.PYTHON.value]
    data = events.join(threads, on=["rank", "pid", "tid"], how="semi").filter(
        pl.col("kind").is_in(data_kinds)
        & (pl.col("dur_ns") > 0)
        & name.str.contains(patterns.DATALOADER)
        & ~name.str.contains(patterns.PROFILER_STEP)
        & ~name.str.contains(patterns.USER_STEP)
    )
    u = union(data, ["rank"])
    loading = covered_in(windows, u, ["rank"]) if windows.height else pl.Series("covered_ns", [], dtype=pl.Int64)
    dur = pl.col("end_ns") - pl.col("start_ns")
    per_step = windows.with_columns(
        pl.lit(HOST_DEVICE, dtype=pl.Int32).alias("device"),
        dur.alias("dur_ns"),
        pl.lit(None, dtype=pl.Int64).alias("busy_ns"),
        loading.alias("data_loading_ns"),
    ).with_columns((pl.col("dur_ns") - pl.col("data_loading_ns")).alias("compute_ns"))
    per_step = per_step.with_columns(
        [pl.lit(0, dtype=pl.Int64).alias(f"{c}_ns") for c in CAUSES if c not in ("compute", "data_loading")]
    ).select(
        pl.col("rank").cast(pl.Int32), "device", pl.col("step").cast(pl.Int64), "start_ns", "end_ns", "dur_ns", "busy_ns",
        *[pl.col(f"{c}_ns").cast(pl.Int64) for c in CAUSES],
    )

    stretches = clip_to_windows(u, windows, ["rank"], ["rank", "step"]).join(
        threads.select("rank", pl.col("pid").alias("host_pid"), pl.col("tid").alias("host_tid")), on="rank", how="left"
    )
    gaps = stretches.with_columns(
        pl.lit(HOST_DEVICE, dtype=pl.Int32).alias("device"),
        dur.alias("dur_ns"),
        pl.lit("data_loading").alias("cause"),
        pl.lit(None, dtype=pl.Int64).alias("next_event_id"),
        pl.lit(None, dtype=pl.Int64).alias("launch_event_id"),
        pl.lit(None, dtype=pl.Int64).alias("sync_event_id"),
    ).with_columns(
        [(dur if c == "data_loading" else pl.lit(0, dtype=pl.Int64)).alias(f"{c}_ns") for c in IDLE_CAUSES]
    ).with_row_index("gap_id")
    gaps = gaps.select(
        "gap_id", pl.col("rank").cast(pl.Int32), "device", pl.col("step").cast(pl.Int64), "start_ns", "end_ns", "dur_ns",
        "cause", pl.col("host_pid").cast(pl.Int64), pl.col("host_tid").cast(pl.Int64), "next_event_id", "launch_event_id",
        "sync_event_id", *[pl.col(f"{c}_ns").cast(pl.Int64) for c in IDLE_CAUSES],
    )
    return per_step, gaps
