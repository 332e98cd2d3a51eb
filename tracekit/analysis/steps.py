"""Finding the training steps (iterations) of a trace.

Sources, in order of trust (the first that yields steps wins, per rank):

1. ``profiler_step``: ``ProfilerStep#N`` ranges written by ``torch.profiler``'s ``step()``.
2. ``user_step``: user or NVTX ranges named like ``step 3`` / ``iteration 3`` / ``tracekit.step#3``.
3. ``optimizer``: ``Optimizer.step#...`` annotations; each step ends with an optimizer step.
4. ``dataloader``: DataLoader ``__next__`` fetches; each step starts with a fetch.
5. ``periodicity``: a kernel that runs once per iteration at a steady cadence.
6. ``whole_trace``: no structure found; the whole trace is one window.

Step windows tile time: a step runs from its start to the next step's start; the last step
runs until its CPU range ends or the GPU work it launched ends, whichever is later.  So
GPU busy time plus idle time equals the window exactly, and no instant is counted twice.
Windows that are not whole iterations (before the first boundary of an optimizer- or
DataLoader-derived split) are kept and marked ``complete = False``, never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from ..schema import EventKind
from . import patterns

STEPS_SCHEMA = {
    "rank": pl.Int32(),
    "step": pl.Int64(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "dur_ns": pl.Int64(),
    "cpu_end_ns": pl.Int64(),
    "complete": pl.Boolean(),
    "source": pl.String(),
}


#: the columns of the events table the step finders read
_FINDER_COLUMNS = ["kind", "name", "rank", "tid", "start_ns", "dur_ns", "end_ns"]


@dataclass(frozen=True)
class Steps:
    """Step windows of every rank and where they came from."""

    #: rank, step, start_ns, end_ns, dur_ns, cpu_end_ns, complete, source
    frame: pl.DataFrame
    #: rank → source name
    sources: dict[int, str]


def find_steps(events: pl.DataFrame, links: pl.DataFrame | None = None) -> Steps:
    """Detect step windows for every rank in ``events`` (see the module docstring)."""
    frames = []
    sources: dict[int, str] = {}
    ranks = sorted(int(r) for r in events["rank"].unique().drop_nulls().to_list()) or [0]
    gpu_end = _launched_gpu_end(events, links)
    # the finders read only these columns: a rank's rows are never a copy of the whole table,
    # and a single-rank trace's are the table itself
    narrow = events.select(_FINDER_COLUMNS)
    single = len(ranks) == 1 and narrow["rank"].null_count() == 0 and narrow["rank"].n_unique() <= 1
    for rank in ranks:
        ev = narrow if single else narrow.filter(pl.col("rank") == rank)
        for source, finder in (
            ("profiler_step", _profiler_steps),
            ("user_step", _user_steps),
            ("optimizer", _optimizer_steps),
            ("dataloader", _dataloader_steps),
            ("periodicity", _periodic_steps),
            ("whole_trace", _whole_trace),
        ):
            raw = finder(ev)
            if raw is not None and raw.height:
                frames.append(_tile(raw, ev, gpu_end, rank, source))
                sources[rank] = source
                break
    frame = pl.concat(frames) if frames else pl.DataFrame(schema=STEPS_SCHEMA)
    return Steps(frame=frame.select(list(STEPS_SCHEMA)).cast(STEPS_SCHEMA), sources=sources)  # type: ignore[arg-type]


def _ranges(ev: pl.DataFrame, pattern: str) -> pl.DataFrame:
    cpu = ev.filter(pl.col("kind").is_in([EventKind.ANNOTATION.value, EventKind.CPU_OP.value]) & pl.col("tid").is_not_null())
    return cpu.filter(pl.col("name").str.contains(pattern))


def _numbered(ranges: pl.DataFrame, pattern: str) -> pl.DataFrame | None:
    if ranges.height == 0:
        return None
    numbered = ranges.with_columns(pl.col("name").str.extract(pattern, 1).cast(pl.Int64, strict=False).alias("step"))
    numbered = numbered.filter(pl.col("step").is_not_null())
    if numbered.height == 0:
        return None
    # one row per step number: the longest range (a nested duplicate is dropped)
    numbered = numbered.sort(["dur_ns", "start_ns"], descending=[True, False]).unique("step", keep="first").sort("start_ns")
    return numbered.select("step", "start_ns", pl.col("end_ns").alias("cpu_end_ns"), pl.lit(True).alias("complete"))


def _profiler_steps(ev: pl.DataFrame) -> pl.DataFrame | None:
    return _numbered(_ranges(ev, patterns.PROFILER_STEP), patterns.PROFILER_STEP)


def _user_steps(ev: pl.DataFrame) -> pl.DataFrame | None:
    return _numbered(_ranges(ev, patterns.USER_STEP), patterns.USER_STEP)


def _boundaries(ev: pl.DataFrame, times: pl.Series, *, first_complete: bool) -> pl.DataFrame | None:
    """Windows between consecutive boundary instants (plus the stretch before the first)."""
    times = times.sort().unique(maintain_order=True)
    if times.len() < 1:
        return None
    cpu = ev.filter(pl.col("tid").is_not_null())
    trace_start = int(cpu["start_ns"].min() if cpu.height else times[0])  # type: ignore[arg-type]
    trace_end = int(ev["end_ns"].max())  # type: ignore[arg-type]
    starts = times.to_list()
    rows = []
    if starts[0] > trace_start:
        rows.append((trace_start, starts[0], first_complete))
    for a, b in zip(starts, [*starts[1:], None], strict=True):
        rows.append((a, b if b is not None else max(trace_end, a), True))
    frame = pl.DataFrame(rows, schema={"start_ns": pl.Int64, "cpu_end_ns": pl.Int64, "complete": pl.Boolean}, orient="row")
    return frame.with_row_index("step").with_columns(pl.col("step").cast(pl.Int64))


def _optimizer_steps(ev: pl.DataFrame) -> pl.DataFrame | None:
    opt = _ranges(ev, patterns.OPTIMIZER_STEP)
    if opt.height < 2:
        return None
    # a step ends where an optimizer step ends: boundaries are the optimizer ends; the stretch
    # before the first one (setup, warm-up) is not a whole iteration
    out = _boundaries(ev, opt["end_ns"], first_complete=False)
    if out is None:
        return None
    # the stretch after the last optimizer step is a partial iteration
    last = out["step"].max()
    return out.with_columns(pl.when(pl.col("step") == last).then(False).otherwise(pl.col("complete")).alias("complete"))


def _dataloader_steps(ev: pl.DataFrame) -> pl.DataFrame | None:
    dl = _ranges(ev, r"(?i)(enumerate\(DataLoader\)|DataLoaderIter\.__next__)")
    if dl.height < 2:
        return None
    return _boundaries(ev, dl["start_ns"], first_complete=False)


def _periodic_steps(ev: pl.DataFrame) -> pl.DataFrame | None:
    """A kernel that runs once per iteration: at least 3 times, at a steady cadence."""
    kernels = ev.filter(pl.col("kind") == EventKind.KERNEL.value)
    if kernels.height < 6:
        return None
    stats = (
        kernels.sort("start_ns")
        .group_by("name")
        .agg(pl.col("start_ns").diff().drop_nulls().alias("gaps"), pl.len().alias("n"))
        .filter(pl.col("n") >= 3)
        .with_columns(
            pl.col("gaps").list.mean().alias("mean"),
            pl.col("gaps").list.std().alias("std"),
        )
        .filter(pl.col("mean") > 0)
        .with_columns((pl.col("std") / pl.col("mean")).alias("cv"))
        .filter(pl.col("cv") < 0.15)
        .sort(["n", "cv", "name"])
    )
    if stats.height == 0:
        return None
    name = stats["name"][0]
    starts = kernels.filter(pl.col("name") == name)["start_ns"]
    return _boundaries(ev, starts, first_complete=False)


def _whole_trace(ev: pl.DataFrame) -> pl.DataFrame | None:
    if ev.height == 0:
        return None
    return pl.DataFrame(
        {"step": [0], "start_ns": [int(ev["start_ns"].min())], "cpu_end_ns": [int(ev["end_ns"].max())], "complete": [True]},  # type: ignore[arg-type]
        schema={"step": pl.Int64, "start_ns": pl.Int64, "cpu_end_ns": pl.Int64, "complete": pl.Boolean},
    )


def _launched_gpu_end(events: pl.DataFrame, links: pl.DataFrame | None) -> pl.DataFrame:
    """For every launch call: (rank, launch start, end of the GPU work it caused)."""
    if links is None or links.height == 0:
        return pl.DataFrame(schema={"rank": pl.Int32, "launch_start_ns": pl.Int64, "gpu_end_ns": pl.Int64})
    launch = events.select(pl.col("event_id").alias("launch_event_id"), "rank", pl.col("start_ns").alias("launch_start_ns"))
    gpu = events.select(pl.col("event_id").alias("gpu_event_id"), pl.col("end_ns").alias("gpu_end_ns"), "kind")
    return (
        links.join(launch, on="launch_event_id")
        .join(gpu, on="gpu_event_id")
        .filter(pl.col("kind") != EventKind.SYNC.value)
        .select("rank", "launch_start_ns", "gpu_end_ns")
        .sort("launch_start_ns")
    )


def _tile(raw: pl.DataFrame, ev: pl.DataFrame, gpu_end: pl.DataFrame, rank: int, source: str) -> pl.DataFrame:
    raw = raw.sort("start_ns")
    next_start = pl.col("start_ns").shift(-1)
    # GPU work launched from inside each step's CPU range extends the last window
    launched = gpu_end.filter(pl.col("rank") == rank)
    if launched.height:
        assigned = launched.join_asof(
            raw.select("step", pl.col("start_ns").alias("_s"), "cpu_end_ns"),
            left_on="launch_start_ns",
            right_on="_s",
            strategy="backward",
            check_sortedness=False,
        ).filter(pl.col("launch_start_ns") <= pl.col("cpu_end_ns"))
        ends = assigned.group_by("step").agg(pl.col("gpu_end_ns").max().alias("_gpu_end"))
        raw = raw.join(ends, on="step", how="left")
    else:
        raw = raw.with_columns(pl.lit(None, dtype=pl.Int64).alias("_gpu_end"))
    own_end = pl.max_horizontal("cpu_end_ns", pl.col("_gpu_end").fill_null(pl.col("cpu_end_ns")))
    tiled = raw.with_columns(
        pl.coalesce(next_start, own_end).alias("end_ns"),
    ).with_columns(
        # a later step starting before this one's CPU range ended (overlapping markers): keep the order
        pl.max_horizontal("end_ns", "start_ns").alias("end_ns")
    )
    return tiled.with_columns(
        pl.lit(rank, dtype=pl.Int32).alias("rank"),
        (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"),
        pl.lit(source).alias("source"),
    ).select(list(STEPS_SCHEMA))
