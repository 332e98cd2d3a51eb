"""CPU-only traces: where the training thread's step time goes when no GPU was recorded.

A trace without GPU activity (a CPU training run, or a capture on a machine without a GPU)
has no device timeline to find idle gaps in.  The training thread *is* the device: each
step window is split into the time that thread spent inside the intervals of the causes that
count without a GPU (:attr:`~tracekit.analysis.causes.Cause.without_gpu`: data-loading ranges,
``tracekit.data_loading``...; the first cause to mark an instant has it) and the rest, counted
as ``compute``.  Rows have the shape of :attr:`Timeline.per_step` (device ``-1``, ``busy_ns``
null: there is no GPU to be busy) so the findings code reads them unchanged.
"""

from __future__ import annotations

import polars as pl

from ..schema import EventKind
from . import causes
from .causes import CAUSES, IDLE_CAUSES, HostEvents
from .intervals import clip_to_windows, complement, covered_in, union

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
    """(per-step rows, the causes' stretches) for a trace with no GPU activity.

    ``per_step`` has the columns of :attr:`Timeline.per_step`; ``gaps`` those of
    :attr:`Timeline.gaps`, one row per stretch of a step the training thread spent in a cause's
    intervals (cause ``data_loading``, or another cause counted without a GPU).
    """
    windows = steps.select("rank", "step", "start_ns", "end_ns").sort("rank", "step")
    threads = main_threads(events)
    dur = pl.col("end_ns") - pl.col("start_ns")
    h = HostEvents.of(events, pl.DataFrame(schema={"launch_event_id": pl.Int64, "gpu_event_id": pl.Int64}))
    counted: dict[str, pl.Series] = {}
    pieces: list[pl.DataFrame] = []
    before: pl.DataFrame | None = None
    for cause in causes.without_gpu():
        assert cause.detector is not None
        own = union(cause.detector(h).join(threads, on=["rank", "pid", "tid"], how="semi"), ["rank"])
        # what an earlier cause marked is its own: this one has the rest of its intervals
        mine = own if before is None else complement(before, own.with_row_index("_i"), ["rank"], ["rank", "_i"]).drop("_i")
        every = mine if before is None else union(pl.concat([before, mine]), ["rank"])
        covered = covered_in(windows, every, ["rank"]) if windows.height else pl.Series("covered_ns", [], dtype=pl.Int64)
        counted[cause.name] = covered - (covered_in(windows, before, ["rank"]) if before is not None and windows.height else 0)
        pieces.append(clip_to_windows(mine, windows, ["rank"], ["rank", "step"]).with_columns(pl.lit(cause.name).alias("cause")))
        before = every
    per_step = windows.with_columns(
        pl.lit(HOST_DEVICE, dtype=pl.Int32).alias("device"),
        dur.alias("dur_ns"),
        pl.lit(None, dtype=pl.Int64).alias("busy_ns"),
        *[v.alias(f"{name}_ns") for name, v in counted.items()],
    ).with_columns((pl.col("dur_ns") - sum((pl.col(f"{n}_ns") for n in counted), pl.lit(0))).alias("compute_ns"))
    per_step = per_step.with_columns(
        [pl.lit(0, dtype=pl.Int64).alias(f"{c}_ns") for c in CAUSES if c != "compute" and c not in counted]
    ).select(
        pl.col("rank").cast(pl.Int32), "device", pl.col("step").cast(pl.Int64), "start_ns", "end_ns", "dur_ns", "busy_ns",
        *[pl.col(f"{c}_ns").cast(pl.Int64) for c in CAUSES],
    )
    return per_step, _stretches(pieces, threads)


def _stretches(pieces: list[pl.DataFrame], threads: pl.DataFrame) -> pl.DataFrame:
    """The rows of :attr:`Timeline.gaps` for the causes' stretches on the training thread."""
    dur = pl.col("end_ns") - pl.col("start_ns")
    schema = {"rank": pl.Int64, "step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "cause": pl.String}
    stretches = (pl.concat(pieces, how="vertical_relaxed") if pieces else pl.DataFrame(schema=schema)).join(
        threads.select("rank", pl.col("pid").alias("host_pid"), pl.col("tid").alias("host_tid")), on="rank", how="left"
    )
    gaps = stretches.with_columns(
        pl.lit(HOST_DEVICE, dtype=pl.Int32).alias("device"),
        dur.alias("dur_ns"),
        pl.lit(None, dtype=pl.Int64).alias("next_event_id"),
        pl.lit(None, dtype=pl.Int64).alias("launch_event_id"),
        pl.lit(None, dtype=pl.Int64).alias("sync_event_id"),
    ).with_columns(
        [pl.when(pl.col("cause") == c).then(dur).otherwise(0).cast(pl.Int64).alias(f"{c}_ns") for c in IDLE_CAUSES]
    ).with_row_index("gap_id")
    return gaps.select(
        "gap_id", pl.col("rank").cast(pl.Int32), "device", pl.col("step").cast(pl.Int64), "start_ns", "end_ns", "dur_ns",
        "cause", pl.col("host_pid").cast(pl.Int64), pl.col("host_tid").cast(pl.Int64), "next_event_id", "launch_event_id",
        "sync_event_id", *[pl.col(f"{c}_ns").cast(pl.Int64) for c in IDLE_CAUSES],
    )
