"""The ``timeline`` tool's answer: one step's critical path and idle gaps, compact.

Times are milliseconds from the step's start (``*_ms``; ``start_ns`` is the step's start on
the trace's clock).  The critical path is given as runs: consecutive segments with the same
cause on the same track are merged into one row, named after the run's longest event.  The
idle gaps are the step's GPU idle intervals, each with the cause it is charged to (the causes
of docs/json-report.md's breakdown).  Both lists keep the longest rows up to the row cap, in
time order, and say how many rows there were.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from .. import pipeline
from ..errors import UsageError


def step_timeline(trace: pipeline.TraceResult, step: int | None, cap: int) -> dict[str, Any]:
    """The timeline document of ``step`` of ``trace`` (its representative step when None)."""
    d = trace.diagnosis
    steps = d.steps
    if steps.height == 0:
        raise UsageError("the trace has no steps, so no step timeline", path=trace.path)
    chosen = "given"
    if step is None:
        pick = trace.representative_step()
        assert pick is not None  # steps is not empty
        rank, step = pick
        chosen = "representative (the complete step closest to the median)"
    else:
        ranks = steps.filter(pl.col("step") == step)["rank"]
        if ranks.len() == 0:
            known = steps.sort("step")["step"].unique(maintain_order=True)
            raise UsageError(f"the trace has no step {step}", path=trace.path,
                             hint=f"steps: {', '.join(map(str, known.head(20).to_list()))}{' ...' if known.len() > 20 else ''}")
        rank = int(ranks.min())  # type: ignore[arg-type]
    row = steps.filter((pl.col("rank") == rank) & (pl.col("step") == step)).row(0, named=True)
    t0 = int(row["start_ns"])
    return {
        "trace": trace.path,
        "rank": rank,
        "step": step,
        "chosen": chosen,
        "start_ns": t0,
        "dur_ms": _ms(row["dur_ns"]),
        "complete": bool(row["complete"]),
        "gpu_busy_ms": _ms(row["gpu_busy_ns"]),
        "utilization": None if row["utilization"] is None else round(float(row["utilization"]), 4),
        "critical_path": _path(trace, rank, step, t0, cap),
        "idle_gaps": _gaps(d.timeline.gaps, rank, step, t0, cap),
        "sync_points": int(d.syncs.filter((pl.col("rank") == rank) & (pl.col("step") == step)).height),
    }


def _ms(ns: Any) -> float | None:
    return None if ns is None else round(float(ns) / 1e6, 4)


def _keep_longest(frame: pl.DataFrame, cap: int) -> pl.DataFrame:
    """The ``cap`` longest rows of ``frame`` (``dur_ns``), in time order."""
    if frame.height > cap:
        frame = frame.sort(["dur_ns", "start_ns"], descending=[True, False]).head(cap)
    return frame.sort("start_ns")


def _path(trace: pipeline.TraceResult, rank: int, step: int, t0: int, cap: int) -> dict[str, Any] | None:
    cp = trace.diagnosis.critical_path
    if cp is None:
        return None
    seg = cp.segments.filter((pl.col("rank") == rank) & (pl.col("step") == step)).sort("seq")
    if seg.height == 0:
        return None
    names = trace.tables.events.select("event_id", "name")
    seg = seg.with_columns(pl.col("cause").cast(pl.String), pl.col("track").cast(pl.String), pl.col("edge_kind").cast(pl.String))
    # a new run starts where the cause or the track changes
    run = ((pl.col("cause") != pl.col("cause").shift(1)) | (pl.col("track") != pl.col("track").shift(1))).fill_null(True).cum_sum()
    runs = (
        seg.with_columns(run.alias("run"))
        .join(names, on="event_id", how="left")
        .sort(["run", "dur_ns"], descending=[False, True])
        .group_by("run", maintain_order=True)
        .agg(
            pl.col("start_ns").min(), pl.col("end_ns").max(), pl.col("dur_ns").sum(), pl.col("cause").first(),
            pl.col("track").first(), pl.col("edge_kind").first().alias("kind"), pl.col("name").drop_nulls().first(),
            pl.len().alias("segments"), pl.col("inferred").any(),
        )
    )
    kept = _keep_longest(runs, cap)
    by_cause = seg.group_by("cause").agg(pl.col("dur_ns").sum()).sort(["dur_ns", "cause"], descending=[True, False])
    return {
        "path_ms": _ms(seg["dur_ns"].sum()),
        "breakdown_ms": {c: _ms(ns) for c, ns in by_cause.iter_rows()},
        "runs": [
            {
                "start_ms": _ms(r["start_ns"] - t0), "dur_ms": _ms(r["dur_ns"]), "cause": r["cause"], "track": r["track"],
                "kind": r["kind"], "name": r["name"], "segments": r["segments"], "inferred": bool(r["inferred"]),
            }
            for r in kept.iter_rows(named=True)
        ],
        "runs_total": runs.height,
    }


def _gaps(gaps: pl.DataFrame, rank: int, step: int, t0: int, cap: int) -> dict[str, Any]:
    mine = gaps.filter((pl.col("rank") == rank) & (pl.col("step") == step)).with_columns(pl.col("cause").cast(pl.String))
    by_cause = mine.group_by("cause").agg(pl.col("dur_ns").sum()).sort(["dur_ns", "cause"], descending=[True, False])
    kept = _keep_longest(mine.select("device", "start_ns", "dur_ns", "cause"), cap)
    return {
        "idle_ms": _ms(mine["dur_ns"].sum()),
        "by_cause_ms": {c: _ms(ns) for c, ns in by_cause.iter_rows()},
        "gaps": [
            {"device": r["device"], "start_ms": _ms(r["start_ns"] - t0), "dur_ms": _ms(r["dur_ns"]), "cause": r["cause"]}
            for r in kept.iter_rows(named=True)
        ],
        "gaps_total": mine.height,
    }


__all__ = ["step_timeline"]
