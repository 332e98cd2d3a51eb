"""Host-device synchronisation points: where the host stopped and waited for the GPU.

Sources, merged into one table (one row per sync point):

* explicit ``sync`` rows (Kineto ``cuda_sync``, Nsight SYNCHRONIZATION) — exact waits;
* synchronising runtime calls by name (``cudaStreamSynchronize``, ``cudaDeviceSynchronize``,
  ``cudaEventSynchronize``, the blocking ``cudaMemcpy`` family, HIP equivalents);
* data-dependent operators (``aten::item``, ``aten::nonzero``...) when no call inside them
  was recorded — inferred, and marked so.

Each point names the operator that caused it (the outermost ``cpu_op`` around it on the
same thread, e.g. ``aten::item`` for ``loss.item()``) and, when the trace has stacks, the
innermost frame of the user's code around it (:mod:`.codeloc`: not torch, the standard
library or an installed package), as the trace names it (``train.py(42): train_step``).
"""

from __future__ import annotations

import polars as pl

from ..schema import EventKind
from .classify import is_blocking_call, is_data_dependent_op, is_host_wait_row
from .codeloc import locate, user_frames
from .intervals import enclosing

SYNC_COLUMNS = {
    "rank": pl.Int32(),
    "step": pl.Int64(),
    "pid": pl.Int64(),
    "tid": pl.Int64(),
    "event_id": pl.Int64(),
    "api": pl.String(),
    "sync_kind": pl.String(),
    "start_ns": pl.Int64(),
    "dur_ns": pl.Int64(),
    "op": pl.String(),
    "python_frame": pl.String(),
    "explicit": pl.Boolean(),
}


def find_syncs(events: pl.DataFrame, links: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """One row per host-device synchronisation (see the module docstring)."""
    name = pl.col("name")
    calls = events.filter(is_blocking_call())
    rows = events.filter(is_host_wait_row())
    # explicit rows confirm (and name) the calls they belong to
    confirmed = links.join(rows.select(pl.col("event_id").alias("gpu_event_id"), pl.col("sync_kind").alias("_row_kind")), on="gpu_event_id")
    calls = calls.join(
        confirmed.group_by("launch_event_id").agg(pl.col("_row_kind").first()),
        left_on="event_id", right_on="launch_event_id", how="left",
    )
    call_points = calls.select(
        "rank", "pid", "tid", "event_id", pl.col("name").alias("api"),
        pl.coalesce(pl.col("_row_kind").cast(pl.String), _kind_from_name(name)).alias("sync_kind"),
        "start_ns", "dur_ns", pl.col("_row_kind").is_not_null().alias("explicit"),
    )
    orphan_rows = rows.join(confirmed.select(pl.col("gpu_event_id").alias("event_id")), on="event_id", how="anti").filter(
        pl.col("tid").is_not_null()
    )
    row_points = orphan_rows.select(
        "rank", "pid", "tid", "event_id", pl.col("name").alias("api"), pl.col("sync_kind").cast(pl.String),
        "start_ns", "dur_ns", pl.lit(True).alias("explicit"),
    )
    points = pl.concat([call_points, row_points], how="vertical_relaxed")
    # data-dependent ops with no recorded sync inside: inferred points
    ops = events.filter(is_data_dependent_op())
    if ops.height:
        inside = enclosing(points, ops, "_op_id", outermost=True, all_matches=True)
        covered_ops = inside.select(pl.col("_op_id").alias("event_id")).drop_nulls().unique()
        lone = ops.join(covered_ops, on="event_id", how="anti")
        inferred = lone.select(
            "rank", "pid", "tid", "event_id", pl.col("name").alias("api"), pl.lit("data_dependent_op").alias("sync_kind"),
            "start_ns", "dur_ns", pl.lit(False).alias("explicit"),
        )
        points = pl.concat([points, inferred], how="vertical_relaxed")
    if points.height == 0:
        return pl.DataFrame(schema=SYNC_COLUMNS)
    cpu_ops = events.filter(pl.col("kind") == EventKind.CPU_OP.value)
    points = points.with_row_index("_p")
    outer = enclosing(points, cpu_ops, "op", outermost=True, take="name")
    frame = locate(points, user_frames(events)).select("_p", pl.col("frame").alias("python_frame"))
    points = points.join(outer.select("_p", "op"), on="_p", how="left").join(frame, on="_p", how="left")
    # an op that is itself the point (an inferred data-dependent op) names itself
    points = points.with_columns(pl.coalesce("op", pl.when(pl.col("sync_kind") == "data_dependent_op").then(pl.col("api"))).alias("op"))
    points = _assign_step(points, steps)
    return points.select(list(SYNC_COLUMNS)).cast(SYNC_COLUMNS).sort(["rank", "start_ns"])  # type: ignore[arg-type]


def _kind_from_name(name: pl.Expr) -> pl.Expr:
    return (
        pl.when(name.str.contains("(?i)DeviceSynchronize|CtxSynchronize|ThreadSynchronize")).then(pl.lit("context_sync"))
        .when(name.str.contains("(?i)StreamSynchronize")).then(pl.lit("stream_sync"))
        .when(name.str.contains("(?i)EventSynchronize")).then(pl.lit("event_sync"))
        .otherwise(pl.lit("blocking_memcpy"))
    )


def _assign_step(frame: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    if steps.height == 0:
        return frame.with_columns(pl.lit(None, dtype=pl.Int64).alias("step"))
    s = steps.select("rank", "step", pl.col("start_ns").alias("_ws"), pl.col("end_ns").alias("_we")).sort("_ws")
    joined = frame.sort("start_ns").join_asof(s, left_on="start_ns", right_on="_ws", by="rank", strategy="backward", check_sortedness=False)
    return joined.with_columns(pl.when(pl.col("start_ns") < pl.col("_we")).then(pl.col("step")).otherwise(None).alias("step")).drop("_ws", "_we")
