"""What-if questions answered on the step graphs: each step's longest path recomputed with the
edges of some causes re-weighted (:mod:`tracekit.analysis.whatif`)."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from ..whatif import TAGS, WhatIf, WhatIfResult, scenario_weights
from .edges import EDGE_PRIORITY, STEP_KEY
from .longest import step_lengths


def evaluate(edges: pl.DataFrame, steps: pl.DataFrame, what_ifs: Sequence[WhatIf]) -> list[WhatIfResult]:
    """Recompute every step's longest path under each what-if (one graph per step)."""
    if not what_ifs:
        return []
    return what_if_results(steps, scenario_lengths(edges, what_ifs), what_ifs)


def scenario_lengths(edges: pl.DataFrame, what_ifs: Sequence[WhatIf]) -> pl.DataFrame:
    """rank, step, ``_base`` (the longest path's length) and ``_s<i>`` (its length under the
    i-th what-if) of every step of ``edges``."""
    cols = [f"_s{i}" for i in range(len(what_ifs))]
    # only the columns the graphs need, sorted once; each step is a zero-copy slice
    tags = [t for t in TAGS if f"w_{t}" in edges.columns]
    weighted = edges.select(
        *STEP_KEY, "src", "dst", "w", *[scenario_weights(wi, tags).alias(c) for wi, c in zip(what_ifs, cols, strict=True)],
        pl.col("kind").replace_strict(EDGE_PRIORITY, return_dtype=pl.Int32).alias("_prio"),
    ).sort(["rank", "step", "_prio", "dst", "src"])
    attrs = ["w", *cols]
    rows = step_lengths(weighted, attrs)
    return pl.DataFrame(
        [(r, s, *ls) for r, s, ls in rows],
        schema={"rank": pl.Int32, "step": pl.Int64, "_base": pl.Int64, **{c: pl.Int64 for c in cols}},
        orient="row",
    )


def what_if_results(steps: pl.DataFrame, lengths: pl.DataFrame, what_ifs: Sequence[WhatIf]) -> list[WhatIfResult]:
    """Each what-if's result from the steps' path lengths (:func:`scenario_lengths`)."""
    out = []
    info = steps.select("rank", "step", "complete", "wall_ns", "path_ns")
    for i, wi in enumerate(what_ifs):
        frame = lengths.select(*STEP_KEY, "_base", pl.col(f"_s{i}").alias("predicted_path_ns"))
        per_step = info.join(frame, on=STEP_KEY, how="left").with_columns(
            (pl.col("wall_ns") - (pl.col("_base") - pl.col("predicted_path_ns"))).alias("predicted_step_ns")
        ).drop("_base").sort(STEP_KEY)
        out.append(_result(wi, per_step))
    return out


def _result(what_if: WhatIf, per_step: pl.DataFrame) -> WhatIfResult:
    complete = per_step.filter(pl.col("complete") & pl.col("predicted_step_ns").is_not_null())
    if complete.height == 0:
        complete = per_step.filter(pl.col("predicted_step_ns").is_not_null())
    base = complete["wall_ns"].mean() if complete.height else None
    pred = complete["predicted_step_ns"].mean() if complete.height else None
    return WhatIfResult(
        what_if=what_if,
        per_step=per_step,
        baseline_step_ms=None if base is None else float(base) / 1e6,  # type: ignore[arg-type]
        predicted_step_ms=None if pred is None else float(pred) / 1e6,  # type: ignore[arg-type]
    )
