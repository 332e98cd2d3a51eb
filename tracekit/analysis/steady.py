"""The steady state: which steps every per-step number describes, and one statistic for all.

**Warm-up.**  A profiled window often starts with one-time costs: CUDA context creation
inside the first CUDA call, library and module loading (lazy loading runs inside the first
launch of each kernel), cuDNN/cuBLAS autotuning, first-call allocator bursts (seconds of
``cudaMalloc``/``cudaFree`` while cuBLAS initialises) and a first step that is simply slower
because profiling just started.  :func:`find_warmup` marks them:

* one-time intervals on the host: a call of :data:`patterns.WARMUP_API` lasting at least
  :data:`WARMUP_CALL_NS`, an allocator call lasting at least :data:`ALLOCATOR_BURST_NS`
  (steady-state churn is microseconds per call), a launch lasting at least
  :data:`LAUNCH_BURST_NS` (module loading), ranges named like warm-up or autotuning;
* warm-up steps: the leading run of complete steps in which one-time intervals cover at
  least :data:`WARMUP_STEP_SHARE` of the step, or whose first step takes more than
  :data:`SLOW_FIRST_RATIO` times the median of the steps after it;
* a trace without step markers (one ``whole_trace`` window) is cut at the end of its last
  one-time interval: the stretch before is warm-up, the rest the steady window.

Warm-up steps are flagged (``warmup``) and no longer ``complete``: every statistic counts
complete steps only, so they leave the steady-state population everywhere at once.  A
data-quality note names the costs and recommends a profiler schedule that skips them.

**One statistic.**  The headline step time is the *median* step time of the steady-state
population.  Every other per-step number is stated for that same median step: a cause's
milliseconds per step are its share of the population's total time times the median
(:func:`per_median_step`), and a what-if's predicted step time is the median times the
ratio of predicted to measured total time over the population (:func:`restate`).  So the
breakdown adds up to the stated step time exactly, and removing a cause never predicts a
step longer than the current one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import polars as pl

from ..schema import EventKind
from . import patterns
from .intervals import clip_to_windows, covered_in, union
from .steps import Steps
from .whatif import WhatIfResult

#: a one-time API call (context, module, handle creation) this long is warm-up
WARMUP_CALL_NS = 1_000_000
#: a single allocator call this long is a first-call burst (driver init, cuBLAS workspace), not churn
ALLOCATOR_BURST_NS = 20_000_000
#: a launch call this long loaded a module (lazy loading) rather than launched a kernel
LAUNCH_BURST_NS = 20_000_000
#: a leading step whose one-time intervals cover this share of it is a warm-up step
WARMUP_STEP_SHARE = 0.2
#: a first complete step this many times slower than the median of the later ones is warm-up
SLOW_FIRST_RATIO = 2.0
#: steps needed after the first one to judge it slow by comparison
MIN_STEADY_FOR_RATIO = 4

PROFILER_SCHEDULE_HINT = (
    "profile steady steps only: torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=2, active=3)) "
    "and call prof.step() every iteration (nsys: --capture-range=cudaProfilerApi around steady steps, or --delay)"
)


@dataclass(frozen=True)
class WarmUp:
    """One-time costs found in the profiled window."""

    #: rank, step, start_ns, end_ns, dur_ns, one_time_ns — the steps left out of the steady state
    steps: pl.DataFrame
    #: the one-time calls and ranges by name: name, count, total_ms (largest first)
    calls: tuple[dict[str, Any], ...]
    #: total time of the one-time intervals, ms
    one_time_ms: float

    @property
    def found(self) -> bool:
        return self.steps.height > 0

    def note(self) -> str | None:
        """The data-quality note, or None when no warm-up was found."""
        if not self.found:
            return None
        what = ", ".join(f"{c['name']} ×{c['count']} ({_dur(c['total_ms'])})" for c in self.calls[:4])
        total = float(self.steps["dur_ns"].sum()) / 1e6
        n = self.steps.height
        return (
            f"Warm-up in the profiled window: {n} step window(s) ({_dur(total)}) with one-time costs"
            + (f" ({what})" if what else " (the first step after profiling started is much slower than the rest)")
            + " were left out of the steady state; " + PROFILER_SCHEDULE_HINT + "."
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": [{"rank": r, "step": s, "dur_ms": round(d / 1e6, 3)} for r, s, d in self.steps.select("rank", "step", "dur_ns").iter_rows()],
            "one_time_ms": round(self.one_time_ms, 3),
            "calls": list(self.calls),
        }


def no_warmup() -> WarmUp:
    return WarmUp(steps=_empty_warmup(), calls=(), one_time_ms=0.0)


def one_time_intervals(events: pl.DataFrame) -> pl.DataFrame:
    """Host rows that are one-time costs (see the module docstring): rank, pid, tid, name, start_ns, end_ns, dur_ns."""
    name = pl.col("name")
    api = pl.col("kind").is_in([EventKind.RUNTIME.value, EventKind.DRIVER.value])
    ranges = pl.col("kind").is_in([EventKind.ANNOTATION.value, EventKind.CPU_OP.value])
    dur = pl.col("dur_ns")
    pick = (
        (api & name.str.contains(patterns.WARMUP_API) & (dur >= WARMUP_CALL_NS))
        | (api & name.str.contains(patterns.ALLOCATOR_API) & (dur >= ALLOCATOR_BURST_NS))
        | (api & name.str.contains(patterns.LAUNCH_API) & (dur >= LAUNCH_BURST_NS))
        | (ranges & name.str.contains(patterns.WARMUP_RANGE))
    )
    # cheap filters first: only long API calls and host ranges reach the name patterns
    # (and only the columns read here: the candidates are not a copy of every column)
    candidates = events.select("kind", "rank", "pid", "tid", "name", "start_ns", "end_ns", "dur_ns").filter(pl.col("tid").is_not_null() & (dur > 0) & ((api & (dur >= WARMUP_CALL_NS)) | ranges))
    return candidates.filter(pick).select("rank", "pid", "tid", "name", "start_ns", "end_ns", "dur_ns")


def find_warmup(events: pl.DataFrame, steps: Steps) -> tuple[Steps, WarmUp]:
    """Mark warm-up in ``steps`` (see the module docstring).

    Returns the steps with a ``warmup`` column (warm-up steps are no longer ``complete``; a
    ``whole_trace`` window is split in two) and what was found.
    """
    frame = steps.frame.with_columns(pl.lit(False).alias("warmup"))
    onetime = one_time_intervals(events)
    if frame.height == 0:
        return Steps(frame=frame, sources=steps.sources), no_warmup()
    u = union(onetime, ["rank"]) if onetime.height else onetime.select("rank", "start_ns", "end_ns")
    named = onetime.filter(pl.col("name").str.contains(patterns.WARMUP_RANGE))
    gpu_starts = events.select("kind", "rank", "start_ns").filter(pl.col("kind").is_in([EventKind.KERNEL.value, EventKind.MEMCPY.value, EventKind.MEMSET.value]))
    parts = []
    for (rank,), f in frame.partition_by(["rank"], as_dict=True, maintain_order=True).items():
        mine = u.filter(pl.col("rank") == rank)
        if steps.sources.get(int(rank)) == "whole_trace":
            parts.append(_split_whole(f, mine, named.filter(pl.col("rank") == rank), gpu_starts.filter(pl.col("rank") == rank)))
        else:
            parts.append(_flag_leading(f, mine))
    frame = pl.concat(parts).sort(["rank", "step"])
    flagged = frame.filter(pl.col("warmup"))
    if flagged.height == 0:
        return Steps(frame=frame, sources=steps.sources), no_warmup()
    win = flagged.select("rank", "step", "start_ns", "end_ns")
    inside = clip_to_windows(u, win, ["rank"], ["rank", "step"])
    covered = inside.group_by("rank", "step").agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("one_time_ns"))
    out_steps = flagged.join(covered, on=["rank", "step"], how="left").select(
        "rank", "step", "start_ns", "end_ns", "dur_ns", pl.col("one_time_ns").fill_null(0).cast(pl.Int64)
    )
    in_warm = onetime.join_where(win.rename({"rank": "_r", "start_ns": "_ws", "end_ns": "_we"}),
                                 pl.col("rank") == pl.col("_r"), pl.col("start_ns") < pl.col("_we"), pl.col("end_ns") > pl.col("_ws"))
    calls = (
        in_warm.unique(["rank", "pid", "tid", "name", "start_ns"]).group_by("name")
        .agg(pl.len().alias("count"), (pl.col("dur_ns").sum() / 1e6).round(3).alias("total_ms"))
        .sort(["total_ms", "name"], descending=[True, False]).head(8)
    )
    return Steps(frame=frame, sources=steps.sources), WarmUp(
        steps=out_steps,
        calls=tuple(calls.iter_rows(named=True)),
        one_time_ms=float(out_steps["one_time_ns"].sum()) / 1e6,
    )


def _split_whole(f: pl.DataFrame, u: pl.DataFrame, named: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    """One whole-trace window: the stretch up to the end of the warm-up is left out.

    The warm-up ends where the last range named warm-up ends, else where the last one-time
    interval ends; a cut that would leave a steady window without GPU work (teardown after
    the last iteration) is not made on a trace that has GPU work.
    """
    if f.height != 1:
        return f
    row = f.row(0, named=True)
    ws, we = row["start_ns"], row["end_ns"]
    candidates = [int(x) for x in (named["end_ns"].max(), u.filter(pl.col("start_ns") < we)["end_ns"].max()) if x is not None]  # type: ignore[arg-type]
    cut = next(
        (c for c in candidates if ws < c < we and (gpu.height == 0 or gpu.filter((pl.col("start_ns") >= c) & (pl.col("start_ns") < we)).height)),
        None,
    )
    if cut is None:
        return f
    warm = {**row, "end_ns": cut, "dur_ns": cut - row["start_ns"], "cpu_end_ns": min(row["cpu_end_ns"], cut), "complete": False, "warmup": True}
    rest = {**row, "step": row["step"] + 1, "start_ns": cut, "dur_ns": row["end_ns"] - cut, "cpu_end_ns": max(row["cpu_end_ns"], cut)}
    return pl.DataFrame([warm, rest], schema=f.schema, orient="row")


def _flag_leading(f: pl.DataFrame, u: pl.DataFrame) -> pl.DataFrame:
    """Flag the leading run of complete steps that are warm-up (never all of them)."""
    f = f.sort("start_ns")
    complete = f.filter(pl.col("complete"))
    if complete.height < 2:
        return f
    one_time = covered_in(complete, u.select("start_ns", "end_ns"), []) if u.height else pl.Series([0] * complete.height)
    durs = complete["dur_ns"]
    later = durs.slice(1)
    first_slow = later.len() >= MIN_STEADY_FOR_RATIO and float(durs[0]) > SLOW_FIRST_RATIO * float(later.median())  # type: ignore[arg-type]
    flags = (one_time.cast(pl.Float64) >= WARMUP_STEP_SHARE * durs.cast(pl.Float64)) | (
        (pl.int_range(0, complete.height, eager=True) == 0) & first_slow
    )
    # the leading run only: warm-up comes first, a slow step later is the steady state's business
    n_lead = int(flags.cast(pl.Int32).cum_min().sum())
    if n_lead == 0 or n_lead == complete.height:
        return f
    warm_steps = complete["step"].head(n_lead)
    is_warm = pl.col("step").is_in(warm_steps.implode())
    return f.with_columns(is_warm.alias("warmup"), (pl.col("complete") & ~is_warm).alias("complete"))


def per_median_step(total_ns: float, population_ns: float, step_ms: float | None) -> float:
    """A quantity's ms in the median step: its share of the population's time times the median."""
    if not population_ns or step_ms is None:
        return 0.0
    return float(total_ns) / float(population_ns) * step_ms


def restate(result: WhatIfResult, step_ms: float | None) -> WhatIfResult:
    """A what-if stated for the median step: ``step_ms`` × (predicted / measured time over the
    complete steps).  A question that only removes or shrinks causes never predicts more than
    ``step_ms``."""
    per = result.per_step.filter(pl.col("complete") & pl.col("predicted_step_ns").is_not_null())
    if per.height == 0 or step_ms is None:
        return result
    wall = float(per["wall_ns"].sum())
    if wall <= 0:
        return result
    ratio = float(per["predicted_step_ns"].sum()) / wall
    if all(f <= 1.0 for _, f in result.what_if.factors):
        ratio = min(ratio, 1.0)
    return dataclasses.replace(result, baseline_step_ms=step_ms, predicted_step_ms=step_ms * ratio)


def _dur(ms: float) -> str:
    return f"{ms / 1e3:,.1f} s" if ms >= 1000 else f"{ms:,.1f} ms"


def _empty_warmup() -> pl.DataFrame:
    return pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "dur_ns": pl.Int64, "one_time_ns": pl.Int64})
