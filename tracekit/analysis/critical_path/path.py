"""The critical path of every step of a trace: graphs built group by group, contracted, their
longest paths taken and attributed to causes, what-ifs answered on the way."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import polars as pl

from ..causes import CP_CAUSES
from ..whatif import TAGS, WhatIf
from .edges import BATCH_EVENTS, BREAKDOWN_SCHEMA, STEP_KEY
from .graph import build_windows, launch_latency, step_groups, whole_trace
from .longest import contract, longest_paths
from .result import CriticalPath
from .scenarios import scenario_lengths, what_if_results


def critical_path(
    events: pl.DataFrame,
    links: pl.DataFrame,
    steps: pl.DataFrame,
    *,
    what_ifs: Sequence[WhatIf] = (),
    batch_events: int = BATCH_EVENTS,
) -> CriticalPath:
    """Build every step's graph, find its longest path, and answer ``what_ifs``.

    ``steps`` is the steps table of :func:`tracekit.analysis.steps.find_steps` (rank, step,
    start_ns, end_ns, cpu_end_ns, complete); a trace with no steps comes as one
    ``whole_trace`` window.  Steps are built in groups of about ``batch_events`` events
    (the result does not depend on the grouping: what couples the steps, such as the
    driving thread and the typical launch latency, is computed over the whole trace).
    """
    whole = whole_trace(events, links, steps)
    groups = step_groups(whole, batch_events)
    latency = launch_latency(whole, groups) if len(groups) > 1 else None
    compact_parts: list[pl.DataFrame] = []
    segment_parts: list[pl.DataFrame] = []
    step_parts: list[pl.DataFrame] = []
    # each group's breakdown is summed from its own segments (its steps are in no other group),
    # so the whole trace's segments are never grouped at once
    breakdown_parts: list[pl.DataFrame] = []
    # the what-ifs' path lengths, group by group: no weighted copy of every group's edges
    length_parts: list[pl.DataFrame] = []
    first_node = first_run = 0
    last = len(groups) - 1
    for i, win in enumerate(groups):
        graph = build_windows(whole, win, latency=latency, first_node=first_node)
        if i == last:
            # every group is built: the whole trace's host events, GPU activities and
            # categories go now, before the last contraction and the concatenations below
            del whole
        windows = graph.windows
        first_node = int(graph.nodes["node"].max() or 0) + 1 if graph.nodes.height else first_node  # type: ignore[arg-type]
        compact, runs = contract(graph.edges)
        del graph  # the uncontracted nodes and edges: not needed past this point, and the largest frames
        segments, step_rows = longest_paths(windows, compact, runs)
        del runs
        if first_run:
            compact = compact.with_columns(pl.col("run") + first_run)
        first_run = int(compact["run"].max() or 0) + 1 if compact.height else first_run  # type: ignore[arg-type]
        compact_parts.append(compact)
        segment_parts.append(segments)
        step_parts.append(step_rows)
        breakdown_parts.append(_breakdown(segments, step_rows))
        if what_ifs:
            length_parts.append(scenario_lengths(compact, what_ifs))
        # a tag that carries no time in the group needs no column (most traces use a few tags)
        compact_parts[-1] = _drop_zero_weights(compact)
    compact = _concat_weights(compact_parts)
    segments = _concat(segment_parts)
    step_rows = _concat(step_parts)
    # each step's rows are in cause order within one part: a stable sort by step keeps it
    breakdown = _concat(breakdown_parts).sort(STEP_KEY, maintain_order=True) if len(breakdown_parts) > 1 else breakdown_parts[0]
    results = tuple(what_if_results(step_rows, _concat(length_parts), what_ifs)) if what_ifs else ()
    return CriticalPath(
        segments=segments,
        breakdown=breakdown,
        steps=step_rows,
        edges=compact,
        what_ifs=results,
        notes=tuple(_notes(events, step_rows)),
    )


def _drop_zero_weights(edges: pl.DataFrame) -> pl.DataFrame:
    """``edges`` without the ``w_<tag>`` columns that are zero on every edge."""
    weights = [c for c in edges.columns if c.startswith("w_")]
    if edges.height == 0:
        return edges.drop(weights)
    nonzero = edges.select(*[(pl.col(c) != 0).any() for c in weights]).row(0)
    return edges.drop([c for c, keep in zip(weights, nonzero, strict=True) if not keep])


def _concat_weights(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """The groups' edges in one frame, with a ``w_<tag>`` column (in tag order) for every tag
    some group has one for: zero in the groups without it."""
    wanted = [f"w_{t}" for t in TAGS if any(f"w_{t}" in p.columns for p in parts)]
    cols = [c for c in parts[0].columns if not c.startswith("w_")] + wanted
    return _concat([
        p.select(*[pl.col(c) if c in p.columns else pl.lit(0, dtype=pl.Int64).alias(c) for c in cols]) for p in parts
    ])


def _concat(parts: list[pl.DataFrame]) -> pl.DataFrame:
    return parts[0] if len(parts) == 1 else pl.concat(parts, how="vertical_relaxed")


def critical_path_window(
    events: pl.DataFrame, links: pl.DataFrame, rank: int, start_ns: int, end_ns: int, *, what_ifs: Sequence[WhatIf] = ()
) -> CriticalPath:
    """The critical path of one rank over an arbitrary window (benchmarks, comparisons)."""
    window = pl.DataFrame(
        {"rank": [rank], "step": [0], "start_ns": [start_ns], "end_ns": [end_ns], "cpu_end_ns": [end_ns], "complete": [True]},
        schema={"rank": pl.Int32, "step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "cpu_end_ns": pl.Int64, "complete": pl.Boolean},
    )
    return critical_path(events, links, window, what_ifs=what_ifs)


def _breakdown(segments: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    if segments.height == 0:
        return pl.DataFrame(schema=BREAKDOWN_SCHEMA)
    b = segments.select(*STEP_KEY, "cause", "dur_ns").group_by(*STEP_KEY, "cause").agg(pl.col("dur_ns").sum().alias("ns"))
    b = b.with_columns(pl.col("cause").cast(pl.String))
    b = b.join(steps.select(*STEP_KEY, "path_ns"), on=STEP_KEY).with_columns(
        (pl.col("ns") / pl.when(pl.col("path_ns") > 0).then(pl.col("path_ns")).otherwise(None)).fill_null(0.0).alias("share")
    )
    order = {c: i for i, c in enumerate(CP_CAUSES)}
    b = b.with_columns(pl.col("cause").replace_strict(order, default=len(order), return_dtype=pl.Int32).alias("_o"))
    return b.sort([*STEP_KEY, "_o"]).select(list(BREAKDOWN_SCHEMA)).cast(BREAKDOWN_SCHEMA)  # type: ignore[arg-type]


def _notes(events: pl.DataFrame, steps: pl.DataFrame) -> Iterable[str]:
    if steps.height == 0:
        return
    if int(steps["inferred_sync_edges"].sum() or 0):
        yield (
            "Critical path: some host-device sync dependencies were inferred from blocking API calls and their timing "
            "(no explicit sync rows for them); enable cuda_sync events (Kineto) or nsys --trace=cuda for exact ones."
        )
    short = steps.filter((pl.col("wall_ns") > 0) & (pl.col("path_ns") < pl.col("wall_ns") * 0.99))
    if short.height:
        yield (
            f"Critical path: in {short.height} step(s) the path explains less than 99% of the step time "
            "(work on threads or streams whose dependencies the trace does not record)."
        )
    if int(steps["cycles_broken"].sum() or 0):
        yield "Critical path: inconsistent timestamps created dependency cycles; the weakest edges were dropped."
    del events
