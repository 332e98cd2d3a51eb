"""From measurements to findings: each cause with its cost per step, evidence and fix.

A finding is reported when its cause costs at least :data:`MIN_SHARE` of step time; when
the GPU is busy at least :data:`HEALTHY_UTILIZATION` of the time, idle-time causes are not
reported at all (a saturated GPU has no idle problem to fix).  :func:`build_findings` sorts
them by milliseconds per step; :func:`rank_by_saving` then ranks them by what fixing each
would save according to the critical path's what-if (``predicted_step_ms``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import polars as pl

from . import causes
from .causes import (
    FINDING_BY_NAME,
    FINDING_KINDS,
    FIXES,
    HOST_FIXES,
    HOST_TITLES,
    IDLE_LIKE,
    JOB_FIXES,
    JOB_TITLES,
    MEASURED_FINDINGS,
    TITLES,
    EvidenceInputs,
)
from .codeloc import CodeLocation
from .kernels import KernelStats
from .memory import MemoryHeadroom

if TYPE_CHECKING:
    from .whatif import WhatIfResult

#: a cause must cost at least this share of step time to be reported
MIN_SHARE = 0.05
#: GPU busy share from which idle-time causes are not reported
HEALTHY_UTILIZATION = 0.95


@dataclass(frozen=True)
class Finding:
    """One named cause of lost GPU time."""

    kind: str
    title: str
    ms_per_step: float
    share_of_step: float
    evidence: dict[str, Any]
    fix: str
    #: step time once this cause is removed (filled by the critical-path what-if), ms
    predicted_step_ms: float | None = None
    steps_affected: int = 0
    worst_steps: tuple[int, ...] = field(default_factory=tuple)
    #: the fix the replay modelled to price this finding (None: priced by the critical path)
    modelled_fix: str | None = None
    #: where in the user's code it comes from (Python stacks in the trace, or what a capture
    #: recorded of the program); None when neither says
    location: CodeLocation | None = None

    @classmethod
    def of(
        cls,
        kind: str,
        *,
        ms_per_step: float,
        share_of_step: float,
        evidence: dict[str, Any],
        steps_affected: int = 0,
        worst_steps: tuple[int, ...] = (),
        job: bool = False,
        host_only: bool = False,
    ) -> Finding:
        """A finding of a declared kind, titled and with the fix of the cause registry
        (:mod:`tracekit.analysis.causes`; ``job`` for the cross-rank wording, ``host_only`` for a
        CPU-only trace, where the words speak of the host)."""
        titles, fixes = (JOB_TITLES, JOB_FIXES) if job else (TITLES, FIXES)
        title, fix = titles[kind], fixes[kind]
        if host_only:
            title, fix = HOST_TITLES.get(kind, title), HOST_FIXES.get(kind, fix)
        return cls(
            kind=kind, title=title, ms_per_step=ms_per_step, share_of_step=share_of_step, evidence=evidence,
            fix=fix, steps_affected=steps_affected, worst_steps=worst_steps,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "title": self.title,
            "ms_per_step": round(self.ms_per_step, 4),
            "share_of_step": round(self.share_of_step, 4),
            "predicted_step_ms": None if self.predicted_step_ms is None else round(self.predicted_step_ms, 4),
            "steps_affected": self.steps_affected,
            "worst_steps": list(self.worst_steps),
            "evidence": self.evidence,
            "fix": self.fix,
            "modelled_fix": self.modelled_fix,
            "location": None if self.location is None else self.location.to_dict(),
        }


def build_findings(
    *,
    per_step: pl.DataFrame,
    gaps: pl.DataFrame,
    syncs: pl.DataFrame,
    kernels: KernelStats,
    memory: list[MemoryHeadroom],
    events: pl.DataFrame,
    utilization: float | None,
    host_only: bool = False,
    step_ms: float | None = None,
    windows_ns: int | None = None,
) -> list[Finding]:
    """Findings from the primary-device per-step accounting (complete steps only).

    ``host_only``: the trace recorded no GPU activity; titles and fixes speak of the training
    thread (:data:`HOST_TITLES`), not of a GPU that was never seen.  ``step_ms``: the stated
    (median) step time; each cause's ms per step is its share of the steps' time times it, so
    findings and breakdown describe the same step (:mod:`.steady`).  Without it, means over
    ``per_step``.  ``windows_ns``: the time of every step window, the denominator of the share
    of fp32 matrix-multiply time (kernel statistics cover the whole trace).
    """
    n_steps = per_step.height
    if n_steps == 0:
        return []
    total_ms = float(per_step["dur_ns"].sum()) / 1e6
    if step_ms is None:
        step_ms = total_ms / n_steps
    healthy = utilization is not None and utilization >= HEALTHY_UTILIZATION
    inputs = EvidenceInputs(per_step, gaps, syncs, kernels, events, memory=tuple(memory), windows_ns=windows_ns)
    found: list[Finding] = []
    for kind in MEASURED_FINDINGS:
        col = f"{kind}_ns"
        share = float(per_step[col].sum()) / 1e6 / total_ms if total_ms else 0.0
        ms = share * step_ms
        if share < MIN_SHARE or (healthy and kind in IDLE_LIKE):
            continue
        affected = per_step.filter(pl.col(col) > 0)
        worst = affected.sort(col, descending=True).head(3)["step"].to_list()
        found.append(
            Finding.of(
                kind, ms_per_step=ms, share_of_step=share, evidence=_evidence(kind, inputs),
                steps_affected=affected.height, worst_steps=tuple(int(s) for s in worst), host_only=host_only,
            )
        )
    # the kinds measured otherwise (fp32 matrix multiplies from kernel names)
    for spec in causes.findings():
        if spec.detect is None or spec.refines or spec.job:
            continue
        hit = spec.detect(inputs)
        if hit is not None and hit.share >= MIN_SHARE:
            found.append(Finding.of(
                spec.name, ms_per_step=hit.share * step_ms, share_of_step=hit.share, evidence=hit.evidence,
                steps_affected=n_steps if hit.steps_affected is None else hit.steps_affected, host_only=host_only,
            ))
    # a finding refined by evidence of its own (launch-bound with a demonstrably small batch):
    # one finding, not two with the same ms
    found = _refined(found, inputs)
    order = {k: i for i, k in enumerate(FINDING_KINDS)}
    return sorted(found, key=lambda f: (-round(f.ms_per_step, 6), order[f.kind]))


def _refined(found: list[Finding], inputs: EvidenceInputs) -> list[Finding]:
    """Each finding whose kind another kind refines (``FindingKind.refines``) becomes that kind
    when its detector finds the evidence: the same cost, its evidence added, its title and fix."""
    for spec in causes.findings():
        if not spec.refines or spec.detect is None:
            continue
        refined = next((f for f in found if f.kind == spec.refines), None)
        hit = spec.detect(inputs) if refined is not None else None
        if refined is None or hit is None:
            continue
        better = dataclasses.replace(
            refined, kind=spec.name, title=TITLES[spec.name], evidence={**refined.evidence, **hit.evidence}, fix=FIXES[spec.name]
        )
        found = [better if f is refined else f for f in found]
    return found


def rank_by_saving(found: Sequence[Finding], predictions: Mapping[str, WhatIfResult]) -> list[Finding]:
    """Fill each finding's ``predicted_step_ms`` and rank by the step time fixing it would save.

    ``predictions`` maps a finding kind to the critical path's answer for "what if this cause
    were gone".  Time that overlaps other work saves nothing, so a finding with fewer ms per
    step can rank first.  Ties (and findings without a prediction, last) keep the ms-per-step
    order.
    """
    order = {k: i for i, k in enumerate(FINDING_KINDS)}
    ranked = []
    for f in found:
        answer = predictions.get(f.kind)
        if answer is not None and answer.predicted_step_ms is not None:
            f = dataclasses.replace(f, predicted_step_ms=answer.predicted_step_ms)
        saving = None if answer is None else answer.saving_ms
        ranked.append((saving is None, -round(saving or 0.0, 6), -round(f.ms_per_step, 6), order[f.kind], f))
    return [r[-1] for r in sorted(ranked, key=lambda r: r[:-1])]


def price_by_replay(
    found: Sequence[Finding], fixes: Mapping[str, tuple[float, float]], step_ms: float, models: Mapping[str, str],
    intermittent: Mapping[str, tuple[float, float]] | None = None,
) -> list[Finding]:
    """Each finding the replay priced (``fixes``: kind → (saving ms, predicted step ms)) costs
    what its modelled fix saves per step, predicts the replayed step, and names the fix
    modelled (``models``); findings are ranked by that saving (unpriced ones keep their place
    after them).  A finding whose fix saves less than :data:`MIN_SHARE` of the step is dropped
    (the time it explains would be lost anyway: a blocking copy on a host slower than its GPU).

    A cause present in only some steps (``intermittent``: kind → (its fix's saving in the
    median step, the mean steady step)) costs its fix's mean saving over the steady steps and
    predicts the median step once fixed; its evidence says so and gives the mean step before
    and after the fix."""
    order = {k: i for i, k in enumerate(FINDING_KINDS)}
    priced, rest = [], []
    for f in found:
        if f.kind not in fixes:
            rest.append(f)
            continue
        saving, predicted = fixes[f.kind]
        if step_ms and saving < MIN_SHARE * step_ms:
            continue
        evidence = f.evidence
        if intermittent is not None and f.kind in intermittent:
            median_saving, mean_step = intermittent[f.kind]
            evidence = {
                **f.evidence,
                "intermittent": {
                    "statistic": "mean saving per steady step",
                    "median_step_saving_ms": round(median_saving, 3),
                    "mean_step_ms": round(mean_step, 3),
                    "predicted_mean_step_ms": round(max(mean_step - saving, 0.0), 3),
                },
            }
        priced.append(dataclasses.replace(
            f, ms_per_step=saving, share_of_step=saving / step_ms if step_ms else 0.0, predicted_step_ms=predicted,
            modelled_fix=models.get(f.kind), evidence=evidence,
        ))
    # savings within 1% of the step of each other tie (a sync that serialises loading and
    # compute: removing either saves the same); ties keep the kinds' order
    priced.sort(key=lambda f: (-round(f.ms_per_step / step_ms, 2) if step_ms else 0.0, order[f.kind]))
    return [*priced, *rest]


def found_by_replay(
    kind: str, saving: float, predicted: float, step_ms: float, model: str | None, *, per_step: pl.DataFrame, gaps: pl.DataFrame,
    syncs: pl.DataFrame, kernels: KernelStats, events: pl.DataFrame,
) -> Finding:
    """A finding the replay found (a kind the registry lets it find, ``FindingKind.replay_finds``),
    costed by its fix's saving."""
    col = f"{kind}_ns"
    affected = per_step.filter(pl.col(col) > 0) if col in per_step.columns else per_step.clear()
    evidence = _evidence(kind, EvidenceInputs(per_step, gaps, syncs, kernels, events)) if col in per_step.columns else {}
    evidence["found_by"] = "replay"
    return Finding(
        kind=kind, title=TITLES[kind], ms_per_step=saving, share_of_step=saving / step_ms if step_ms else 0.0, evidence=evidence,
        fix=FIXES[kind], predicted_step_ms=predicted, steps_affected=affected.height if affected.height else per_step.height,
        modelled_fix=model,
    )


def _evidence(kind: str, x: EvidenceInputs) -> dict[str, Any]:
    """A measured cause's evidence: its common facts (total, gaps, largest gap) and the entries of
    the builder the registry names for it (``FindingKind.evidence``)."""
    col = f"{kind}_ns"
    ev: dict[str, Any] = {"total_ms": round(float(x.per_step[col].sum()) / 1e6, 3)}
    if col in x.gaps.columns:
        g = x.gaps.filter(pl.col(col) > 0).sort(col, descending=True)
        ev["gaps"] = g.height
        if g.height:
            ev["largest_gap"] = {
                "step": g["step"][0],
                "start_ns": g["start_ns"][0],
                "dur_ms": round(g["dur_ns"][0] / 1e6, 3),
                "attributed_ms": round(g[col][0] / 1e6, 3),
            }
    builder = FINDING_BY_NAME[kind].evidence
    if callable(builder):
        ev.update(builder(x))
    return ev
