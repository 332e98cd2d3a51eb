"""The critical path of a trace as a frozen result: segments, breakdown, steps and the graphs kept
for what-ifs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import polars as pl

from ..causes import CP_CAUSES
from ..steady import restate
from ..whatif import WhatIf, WhatIfResult
from .edges import STEP_KEY
from .scenarios import evaluate


@dataclass(frozen=True, eq=False)
class CriticalPath:
    """The critical path of every step of a trace, its breakdown, and the graphs for what-ifs."""

    #: rank, step, seq, start_ns, end_ns, dur_ns, track, event_id, edge_kind, cause, inferred
    #: (:data:`SEGMENT_SCHEMA`: ``track`` categorical, ``edge_kind`` and ``cause`` enums)
    segments: pl.DataFrame
    #: rank, step, cause, ns, share (of the path)
    breakdown: pl.DataFrame
    #: rank, step, complete, start_ns, end_ns, wall_ns, path_ns, nodes, edges, sync_edges,
    #: inferred_sync_edges, cycles_broken
    steps: pl.DataFrame
    #: every step's (contracted) graph: rank, step, src, dst, w, kind, tag, removable, inferred,
    #: event_id, track (null for a host thread's stretches, which carry pid and tid instead),
    #: pid, tid, start_ns, end_ns, run, and w_<tag> for every tag of :data:`.whatif.TAGS` that
    #: carries time on some edge (a tag without a column: zero everywhere; ``kind`` and ``tag``
    #: enums, ``track`` categorical)
    edges: pl.DataFrame
    #: what-ifs computed with the path (the findings', and any the caller asked for)
    what_ifs: tuple[WhatIfResult, ...] = ()
    #: data-quality notes about the graph (inferred syncs, broken chains)
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: the step time every per-step number is stated for (the median step, set by ``diagnose``;
    #: see analysis/steady.py); None: means over complete steps
    stated_step_ms: float | None = None

    @property
    def inferred_sync(self) -> bool:
        """True when some sync dependency came from API names and timing, not sync rows."""
        return bool(self.steps["inferred_sync_edges"].sum() or 0)

    def breakdown_per_step(self) -> dict[str, float]:
        """cause → ms per step on the critical path (mean over complete steps; with
        ``stated_step_ms``, each cause's share of the path times that step time)."""
        complete = self.steps.filter(pl.col("complete")).select(STEP_KEY)
        if complete.height == 0:
            complete = self.steps.select(STEP_KEY)
        rows = self.breakdown.join(complete, on=STEP_KEY, how="semi")
        n = max(complete.height, 1)
        totals = {c: 0.0 for c in CP_CAUSES}
        for cause, ns in rows.group_by("cause").agg(pl.col("ns").sum()).iter_rows():
            totals[str(cause)] = float(ns) / 1e6 / n
        path = sum(totals.values())
        if self.stated_step_ms is not None and path > 0:
            totals = {c: v / path * self.stated_step_ms for c, v in totals.items()}
        return totals

    def breakdown_share(self) -> dict[str, float]:
        """cause → share of the critical path (complete steps)."""
        ms = self.breakdown_per_step()
        total = sum(ms.values())
        return {c: (v / total if total else 0.0) for c, v in ms.items()}

    def what_if(self, factors: Mapping[str, float]) -> WhatIfResult:
        """Predicted step times when the given causes are scaled (see :mod:`.whatif`); stated
        for ``stated_step_ms`` when it is set, like the findings' predictions."""
        result = evaluate(self.edges, self.steps, [WhatIf.of(factors)])[0]
        if self.stated_step_ms is None:
            return result
        return restate(result, self.stated_step_ms)

    def predicted_step_ms(self, cause: str, factor: float = 0.0) -> float | None:
        """Mean predicted step time (complete steps) with one cause scaled by ``factor``."""
        for result in self.what_ifs:
            if result.what_if.factors == ((cause, float(factor)),):
                return result.predicted_step_ms
        return self.what_if({cause: factor}).predicted_step_ms
