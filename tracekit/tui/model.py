"""Display frames for the TUI: the Diagnosis reshaped into what each screen shows.

Everything here is a pure function of a :class:`~tracekit.tui.session.Session` (or one of its
traces) returning polars frames or small values; screens format them, nothing more.  No
Textual import, so the logic is tested without a terminal.

Time columns meant for people are in milliseconds relative to the start of the step
(``at_ms``) or as durations (``dur_ms``); the absolute ``start_ns``/``end_ns`` stay in the
frames (hidden by the tables) so that Enter can open the timeline at the right place.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl

from ..analysis import Diagnosis
from ..analysis.causes import CAUSES, FINDING_BY_NAME, IDLE_CAUSES, finding_cause
from ..analysis.findings import Finding
from ..report.formatting import scale_ns
from ..schema import EventKind, TraceTables

if TYPE_CHECKING:
    from .session import LoadedTrace


@dataclass(frozen=True)
class Focus:
    """A place in a trace to show on the timeline: a step, optionally a span, event or gap."""

    trace: int
    rank: int
    step: int
    start_ns: int | None = None
    end_ns: int | None = None
    event_id: int | None = None
    gap_id: int | None = None


def breakdown_rows(d: Diagnosis) -> list[tuple[str, float, float]]:
    """(cause, ms per step, share of step) for every cause with time in it, in display order."""
    rows = []
    for cause in CAUSES:
        ms = d.breakdown_ms.get(cause, 0.0)
        share = d.breakdown.get(cause, 0.0)
        # a cause under 0.1% of the step would only draw an empty bar
        if cause == "compute" or share >= 0.001:
            rows.append((cause, ms, share))
    return rows


def utilization_per_step(d: Diagnosis, rank: int) -> pl.DataFrame:
    """step, utilization (0..1, null when unknown), complete — one row per step of ``rank``."""
    return (
        d.steps.filter(pl.col("rank") == rank)
        .sort("step")
        .select("step", pl.col("utilization").cast(pl.Float64), "complete")
    )


def findings_frame(d: Diagnosis) -> pl.DataFrame:
    """One row per finding, largest cost first (the order of ``d.findings``)."""
    return pl.DataFrame(
        {
            "index": list(range(len(d.findings))),
            "kind": [f.kind for f in d.findings],
            "title": [f.title for f in d.findings],
            "ms_per_step": [f.ms_per_step for f in d.findings],
            "share": [f.share_of_step for f in d.findings],
            "predicted_ms": [f.predicted_step_ms for f in d.findings],
            "steps": [f.steps_affected for f in d.findings],
            "worst": [", ".join(str(s) for s in f.worst_steps) for f in d.findings],
        },
        schema={
            "index": pl.Int64, "kind": pl.String, "title": pl.String, "ms_per_step": pl.Float64, "share": pl.Float64,
            "predicted_ms": pl.Float64, "steps": pl.Int64, "worst": pl.String,
        },
    )


def _step_starts(d: Diagnosis) -> pl.DataFrame:
    return d.steps.select("rank", "step", pl.col("start_ns").alias("_step_start"))


def gaps_frame(d: Diagnosis) -> pl.DataFrame:
    """Idle gaps: gap_id, rank, step, device, at_ms, dur_ms, cause, thread, start_ns, end_ns."""
    g = d.timeline.gaps
    if g.height == 0:
        return pl.DataFrame(schema={
            "gap_id": pl.Int64, "rank": pl.Int32, "step": pl.Int64, "device": pl.Int32, "at_ms": pl.Float64,
            "dur_ms": pl.Float64, "cause": pl.String, "thread": pl.String, "start_ns": pl.Int64, "end_ns": pl.Int64,
        })
    return (
        g.join(_step_starts(d), on=["rank", "step"], how="left")
        .select(
            pl.col("gap_id").cast(pl.Int64), "rank", "step", "device",
            ((pl.col("start_ns") - pl.col("_step_start")) / 1e6).alias("at_ms"),
            (pl.col("dur_ns") / 1e6).alias("dur_ms"),
            pl.col("cause").cast(pl.String),
            pl.when(pl.col("host_tid").is_not_null()).then(pl.format("{}/{}", "host_pid", "host_tid")).alias("thread"),
            "start_ns", "end_ns",
        )
        .sort(["rank", "start_ns", "device"])
    )


def syncs_frame(d: Diagnosis) -> pl.DataFrame:
    """Sync points: rank, step, at_ms, dur_ms, api, op, kind, python_frame, explicit, event_id, start_ns."""
    s = d.syncs
    return (
        s.join(_step_starts(d), on=["rank", "step"], how="left")
        .select(
            "rank", "step",
            ((pl.col("start_ns") - pl.col("_step_start")) / 1e6).alias("at_ms"),
            (pl.col("dur_ns") / 1e6).alias("dur_ms"),
            "api", "op", pl.col("sync_kind").alias("kind"), "python_frame", "explicit", "event_id", "start_ns",
        )
        .sort(["rank", "start_ns"])
    )


def kernels_frame(d: Diagnosis) -> pl.DataFrame:
    """Kernel statistics by name: name, category, tensor_cores, count, total_ms, mean_us, max_us, share."""
    k = d.kernels.top
    return k.select(
        "name", "category", "tensor_cores", pl.col("count").cast(pl.Int64),
        (pl.col("total_ns") / 1e6).alias("total_ms"),
        (pl.col("mean_ns") / 1e3).alias("mean_us"),
        (pl.col("max_ns") / 1e3).alias("max_us"),
        pl.col("share_of_kernel_time").alias("share"),
    ).sort(["total_ms", "name"], descending=[True, False], nulls_last=True)


def steps_frame(d: Diagnosis) -> pl.DataFrame:
    """Steps: rank, step, dur_ms, utilization, complete, source, idle_ms, top_idle (largest idle cause)."""
    main = d.timeline.per_step
    primary = pl.DataFrame(
        {"rank": list(d.timeline.primary_device), "device": list(d.timeline.primary_device.values())},
        schema={"rank": pl.Int32, "device": pl.Int32},
    )
    base = d.steps.select(
        "rank", "step", (pl.col("dur_ns") / 1e6).alias("dur_ms"), "utilization", "complete", "source", "start_ns", "end_ns",
    )
    idle_cols = [c for c in IDLE_CAUSES if f"{c}_ns" in main.columns]
    if main.height == 0 or not idle_cols:
        return base.with_columns(pl.lit(None, pl.Float64).alias("idle_ms"), pl.lit(None, pl.String).alias("top_idle"))
    per = main.join(primary, on=["rank", "device"], how="inner")
    # the idle cause columns can repeat a busy label (pageable_memcpy, exposed_communication):
    # the largest of the idle columns names the step's main idle cause
    longest = pl.concat_list([pl.col(f"{c}_ns") for c in idle_cols])
    per = per.select(
        "rank", "step",
        ((pl.col("dur_ns") - pl.col("busy_ns")) / 1e6).alias("idle_ms"),
        pl.when(longest.list.max() > 0)
        .then(pl.lit(pl.Series(idle_cols, dtype=pl.String)).implode().list.get(longest.list.arg_max()))
        .alias("top_idle"),
    )
    return base.join(per, on=["rank", "step"], how="left").sort(["rank", "step"])


def efficiency_frame(d: Diagnosis) -> pl.DataFrame:
    """Operator shapes on the roofline: name, op_class, shape, dtype, calls, total_ms, tflops, gbps,
    bound, attainable (share of the attainable peak), share (of GPU time), and where the first
    call is (rank, step, event_id, start_ns, end_ns)."""
    eff = d.efficiency
    if not eff.available or eff.by_op.height == 0:
        return pl.DataFrame(
            schema={"name": pl.String, "op_class": pl.String, "shape": pl.String, "dtype": pl.String, "calls": pl.Int64,
                    "total_ms": pl.Float64, "tflops": pl.Float64, "gbps": pl.Float64, "bound": pl.String,
                    "attainable": pl.Float64, "share": pl.Float64, "rank": pl.Int32, "step": pl.Int64,
                    "event_id": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64}
        )
    key = ["name", "op_class", "shape", "dtype"]
    first = (
        eff.ops.filter(pl.col("step").is_not_null()).sort("start_ns").unique(key, keep="first", maintain_order=True)
        .select(*key, "rank", "step", "event_id", "start_ns", (pl.col("first_kernel_ns") + pl.col("gpu_ns")).alias("end_ns"))
    )
    return (
        eff.by_op.join(first, on=key, how="left", nulls_equal=True)
        .select(
            *key, pl.col("calls").cast(pl.Int64), (pl.col("gpu_ns") / 1e6).alias("total_ms"), "tflops", "gbps", "bound",
            pl.col("pct_of_attainable").alias("attainable"), pl.col("share_of_gpu_time").alias("share"),
            "rank", "step", "event_id", "start_ns", "end_ns",
        )
        .sort(["total_ms", "name", "shape"], descending=[True, False, False])
    )


def display_frames(d: Diagnosis) -> dict[str, pl.DataFrame]:
    """Every table the tables screen shows, by name."""
    return {
        "gaps": gaps_frame(d), "syncs": syncs_frame(d), "kernels": kernels_frame(d), "steps": steps_frame(d),
        "efficiency": efficiency_frame(d),
    }


def step_of(d: Diagnosis, rank: int, at_ns: int) -> int | None:
    """The step of ``rank`` whose window holds the instant ``at_ns``."""
    hit = d.steps.filter((pl.col("rank") == rank) & (pl.col("start_ns") <= at_ns) & (pl.col("end_ns") > at_ns))
    return int(hit["step"][0]) if hit.height else None


def first_occurrence(trace_index: int, trace: LoadedTrace, finding: Finding) -> Focus | None:
    """Where a finding first shows on the timeline: its first idle gap (in a complete step when
    there is one), the first kernel its evidence lists (``FindingKind.focus_kernels``:
    ``no_tensor_cores``), or its worst step."""
    d = trace.diagnosis
    gaps = d.timeline.gaps
    col = f"{finding_cause(finding.kind)}_ns"
    if col in gaps.columns:
        # the first gap in a complete step (a partial window at the trace's edge is a poor example)
        complete = d.steps.filter(pl.col("complete")).select("rank", "step")
        hits = gaps.filter(pl.col(col) > 0).join(complete, on=["rank", "step"], how="semi").sort("start_ns")
        if hits.height == 0:
            hits = gaps.filter(pl.col(col) > 0).sort("start_ns")
        if hits.height:
            g = hits.row(0, named=True)
            return Focus(trace_index, int(g["rank"]), int(g["step"]), int(g["start_ns"]), int(g["end_ns"]), gap_id=int(g["gap_id"]))
    kind = FINDING_BY_NAME.get(finding.kind)
    if kind is not None and kind.focus_kernels:
        for name in list(finding.evidence.get(kind.focus_kernels, []))[:1]:
            found = kernel_occurrence(trace_index, trace, name)
            if found is not None:
                return found
    if finding.worst_steps:
        step = int(finding.worst_steps[0])
        row = d.steps.filter(pl.col("step") == step).sort("rank")
        if row.height:
            return Focus(trace_index, int(row["rank"][0]), step)
    return None


def kernel_occurrence(trace_index: int, trace: LoadedTrace, name: str) -> Focus | None:
    """The first launch of the kernel ``name`` that falls inside a step."""
    d = trace.diagnosis
    ev = trace.tables.events.filter((pl.col("kind") == EventKind.KERNEL.value) & (pl.col("name") == name))
    if ev.height == 0:
        return None
    # the earliest launches first; steps are few, so joining them on rank stays small
    placed = (
        ev.sort("start_ns").head(256).select("event_id", "rank", "start_ns", "end_ns")
        .join(d.steps.select("rank", "step", pl.col("start_ns").alias("_s"), pl.col("end_ns").alias("_e")), on="rank")
        .filter((pl.col("start_ns") >= pl.col("_s")) & (pl.col("start_ns") < pl.col("_e")))
    )
    if placed.height == 0:
        return None
    r = placed.sort("start_ns").row(0, named=True)
    return Focus(trace_index, int(r["rank"]), int(r["step"]), int(r["start_ns"]), int(r["end_ns"]), event_id=int(r["event_id"]))


def event_row(tables: TraceTables, event_id: int) -> dict[str, Any] | None:
    """The events-table row of ``event_id`` (its position, when the table is in canonical order)."""
    ev = tables.events
    if 0 <= event_id < ev.height and ev["event_id"][event_id] == event_id:
        return ev.row(event_id, named=True)
    hit = ev.filter(pl.col("event_id") == event_id)
    return hit.row(0, named=True) if hit.height else None


def event_args(row: dict[str, Any]) -> list[tuple[str, str]]:
    """The non-empty columns of an event row other than the ones every event has, as text."""
    skip = {"event_id", "kind", "name", "start_ns", "dur_ns", "end_ns"}
    out = []
    for key, value in row.items():
        if key in skip or value is None:
            continue
        if key == "input_dims":
            with contextlib.suppress(TypeError, ValueError):
                value = json.dumps(json.loads(value))
        out.append((key, str(value)))
    return out


def linked_events(tables: TraceTables, event_id: int) -> list[dict[str, Any]]:
    """Events linked to ``event_id`` by a launch link, either way: the kernels a launch call
    issued, or the call that launched a kernel (``direction``: "launched" / "launched by")."""
    links = tables.links
    if links.height == 0:
        return []
    out_ids = links.filter(pl.col("launch_event_id") == event_id)["gpu_event_id"].to_list()
    in_ids = links.filter(pl.col("gpu_event_id") == event_id)["launch_event_id"].to_list()
    result = []
    for direction, ids in (("launched", out_ids), ("launched by", in_ids)):
        for eid in ids[:20]:
            row = event_row(tables, int(eid))
            if row is not None:
                result.append({"direction": direction, **row})
    return result


def critical_segments(d: Diagnosis, rank: int, step: int) -> pl.DataFrame | None:
    """The critical-path segments of one step, when the diagnosis carries a critical path."""
    cp = getattr(d, "critical_path", None)
    segments = getattr(cp, "segments", None) if cp is not None else None
    if not isinstance(segments, pl.DataFrame) or segments.height == 0:
        return None
    return segments.filter((pl.col("rank") == rank) & (pl.col("step") == step)).sort("start_ns")


def fmt_ns(ns: float | None) -> str:
    """A duration in the unit that reads best (ns, µs, ms, s)."""
    if ns is None:
        return "n/a"
    value, unit = scale_ns(ns)
    digits = {"ns": 0, "µs": 1}.get(unit, 2)
    return f"{value:.{digits}f} {unit}"


__all__ = [
    "Focus", "breakdown_rows", "critical_segments", "display_frames", "event_args", "event_row", "findings_frame", "first_occurrence",
    "fmt_ns", "gaps_frame", "kernel_occurrence", "kernels_frame", "linked_events", "step_of", "steps_frame", "syncs_frame",
    "utilization_per_step",
]
