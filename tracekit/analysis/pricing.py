"""The one what-if engine: how every question — a finding's fix, an asked ``--what-if`` — is priced.

Two models answer "how long would a step take if ...":

* the **critical path** (:mod:`.critical_path`, :mod:`.whatif`) scales the edges of the
  question's causes on each step's dependency graph and recomputes the longest path.  It
  answers every question on every trace with steps, one step at a time, and it is the
  explanation the reports show (what decides the step time);
* the **replay** (:mod:`.replay`) replays groups of consecutive steps with the fix edited into
  the program (a fix moves work across step boundaries: without a sync the host loads the next
  batch while the GPU computes).  It is the better model where replaying the recording
  unchanged reproduces it (within :data:`.replay.TRUST_ERROR`).

:func:`answer` asks the critical path first (each finding's what-if and the asked ones), then
the replay where the trace has GPU activity; the replay's answers replace the critical path's
when it is trusted, and :attr:`Answers.priced_by` says which model priced each question.
:func:`~tracekit.analysis.diagnose.diagnose` asks this module and nothing else.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from .causes import FINDING_BY_NAME, FIX_MODELS, REPLAY_FOUND
from .critical_path import CriticalPath, critical_path
from .efficiency import Efficiency
from .findings import HEALTHY_UTILIZATION, MIN_SHARE, Finding, found_by_replay, price_by_replay, rank_by_saving
from .kernels import KernelStats
from .plan import Plan, PlanInputs, build_plan, no_plan
from .replay import Pricing, price
from .steady import restate
from .whatif import WhatIf, finding_what_if

#: :attr:`Answers.priced_by`'s values
REPLAY = "replay"
CRITICAL_PATH = "critical_path"


@dataclass(frozen=True)
class Answers:
    """The priced questions of one trace."""

    #: every step's critical path, with the asked what-ifs' answers (None: the trace has no steps)
    critical_path: CriticalPath | None
    #: the findings, each costing what its fix saves, ranked by it
    findings: tuple[Finding, ...]
    #: what the replay said about itself (why its answers were not used)
    notes: tuple[str, ...]
    #: question (a finding kind, or an asked what-if's label) → the model that priced it:
    #: :data:`REPLAY` or :data:`CRITICAL_PATH`
    priced_by: Mapping[str, str]
    #: the fixes priced together, in the order to make them (:mod:`.plan`)
    plan: Plan


@dataclass(frozen=True)
class PricingInputs:
    """What the engine reads of one trace: its tables and steps, the stated step time and the
    primary device's accounting (complete steps)."""

    events: pl.DataFrame
    links: pl.DataFrame
    steps: pl.DataFrame
    step_ms: float | None
    utilization: float | None
    host_only: bool
    per_step: pl.DataFrame
    gaps: pl.DataFrame
    syncs: pl.DataFrame
    kernels: KernelStats
    #: breakdown cause → ms in the median step (what bounds the step once the plan is applied)
    breakdown_ms: Mapping[str, float] = dataclasses.field(default_factory=dict)
    #: the batch size, for the plan's throughput (None: unknown; a capture's training-loop
    #: DataLoader gives it)
    batch_size: int | None = None


def answer(
    trace: PricingInputs, findings: Sequence[Finding], asked: Sequence[WhatIf], eff: Efficiency, *,
    phase: Callable[[str], None] = lambda _name: None,
) -> Answers:
    """Price every finding's fix and every asked what-if (see the module docstring).

    ``eff`` prices the efficiency findings among ``findings``: all compute kernels scaled so
    that they lose the finding's cost.  ``phase`` is told ``critical path`` and ``replay``.
    """
    per_finding = {f.kind: wi for f in findings if (wi := finding_what_if(f.kind)) is not None}
    per_finding.update(_efficiency_what_ifs(findings, eff))
    ranked = list(findings)
    priced_by: dict[str, str] = {}
    cpath = None
    if trace.steps.height:
        scenarios = list(dict.fromkeys([*per_finding.values(), *asked]))
        phase("critical path")
        cpath = critical_path(trace.events, trace.links, trace.steps, what_ifs=scenarios)
        cpath = dataclasses.replace(
            cpath, what_ifs=tuple(restate(r, trace.step_ms) for r in cpath.what_ifs), stated_step_ms=trace.step_ms
        )
        answers = {r.what_if: r for r in cpath.what_ifs}
        ranked = rank_by_saving(ranked, {kind: answers[wi] for kind, wi in per_finding.items()})
        priced_by.update(dict.fromkeys(per_finding, CRITICAL_PATH))
        priced_by.update(dict.fromkeys((w.label for w in asked), CRITICAL_PATH))
    notes: tuple[str, ...] = ()
    fix_plan = no_plan(
        trace.step_ms, trace.utilization, ranked,
        "Fixes are not priced together on a CPU-only trace; each finding's saving is its own." if trace.host_only and ranked else None,
    )
    if cpath is not None and trace.step_ms is not None and not trace.host_only:
        phase("replay")
        before = ranked
        cpath, ranked, notes, by_replay, pricing = _by_replay(trace, cpath, ranked, asked, trace.step_ms)
        priced_by.update(dict.fromkeys(by_replay, REPLAY))
        phase("plan")
        fix_plan = build_plan(PlanInputs(
            findings=ranked, replayer=pricing.replayer, trusted=pricing.trusted, step_ms=trace.step_ms, utilization=trace.utilization,
            efficiency=eff, kernels=trace.kernels, breakdown_ms=trace.breakdown_ms,
            unreported=_unreported(trace, before, ranked, pricing) if pricing.trusted else {}, batch_size=trace.batch_size,
        ))
    return Answers(critical_path=cpath, findings=tuple(ranked), notes=notes, priced_by=priced_by, plan=fix_plan)


def _unreported(trace: PricingInputs, before: Sequence[Finding], after: Sequence[Finding], pricing: Pricing) -> dict[str, Finding]:
    """The fixes a plan may take that no finding reports: findings whose fix saves too little
    alone (dropped by the replay's pricing), and on an unhealthy trace the kinds the replay may
    find on its own (a pageable copy that only pays once the loader has workers)."""
    reported = {f.kind for f in after}
    out = {f.kind: f for f in before if f.kind not in reported}
    healthy = trace.utilization is not None and trace.utilization >= HEALTHY_UTILIZATION
    assert trace.step_ms is not None
    for kind in () if healthy else REPLAY_FOUND:
        if kind in reported or kind in out:
            continue
        saving, predicted = pricing.fixes.get(kind, (0.0, trace.step_ms))
        f = found_by_replay(
            kind, saving, predicted, trace.step_ms, FIX_MODELS.get(kind), per_step=trace.per_step, gaps=trace.gaps,
            syncs=trace.syncs, kernels=trace.kernels, events=trace.events,
        )
        out[kind] = dataclasses.replace(f, evidence={**f.evidence, "found_by": "plan"})
    return out


def _by_replay(
    trace: PricingInputs, cpath: CriticalPath, findings: list[Finding], asked: Sequence[WhatIf], step_ms: float
) -> tuple[CriticalPath, list[Finding], tuple[str, ...], list[str], Pricing]:
    """Each finding's cost becomes the saving of its fix in the replay, causes the replay finds
    on its own (a sync that prevents overlap) are added, and the asked what-ifs are answered by
    the replay; unchanged where the replay does not reproduce the trace.  Returns the questions
    the replay priced too."""
    healthy = trace.utilization is not None and trace.utilization >= HEALTHY_UTILIZATION
    candidates = [f.kind for f in findings] + ([] if healthy else list(REPLAY_FOUND))
    pricing = price(candidates, trace.events, trace.links, trace.steps, step_ms, tuple(asked))
    if not pricing.trusted:
        return cpath, findings, pricing.notes, [], pricing
    raised = {f.kind for f in findings}
    extra = [
        found_by_replay(
            kind, saving, predicted, step_ms, FIX_MODELS.get(kind), per_step=trace.per_step, gaps=trace.gaps,
            syncs=trace.syncs, kernels=trace.kernels, events=trace.events,
        )
        for kind, (saving, predicted) in pricing.fixes.items()
        if kind not in raised and saving >= MIN_SHARE * step_ms
    ]
    findings = price_by_replay([*findings, *extra], pricing.fixes, step_ms, FIX_MODELS, pricing.intermittent)
    answers = {r.what_if: r for r in cpath.what_ifs}
    for wi in asked:
        if wi.label in pricing.what_ifs and wi in answers:
            answers[wi] = dataclasses.replace(answers[wi], baseline_step_ms=step_ms, predicted_step_ms=pricing.what_ifs[wi.label])
    cpath = dataclasses.replace(cpath, what_ifs=tuple(answers[r.what_if] for r in cpath.what_ifs))
    return cpath, findings, pricing.notes, [*pricing.fixes, *pricing.what_ifs], pricing


def _efficiency_what_ifs(found: Sequence[Finding], eff: Efficiency) -> dict[str, WhatIf]:
    """Price the findings with no what-if of their own (the efficiency findings: busy but slow)
    with the critical path: all compute kernels are scaled so that they lose the finding's cost
    per step (overlap with host work is honoured)."""
    steps = eff.per_step
    if steps.height == 0 or "kernel_ns" not in steps.columns:
        return {}
    counted = steps.filter(pl.col("complete")) if steps.filter(pl.col("complete")).height else steps
    kernel_ms = float(counted["kernel_ns"].sum()) / max(counted.height, 1) / 1e6
    out = {}
    for f in found:
        if kernel_ms > 0 and finding_what_if(f.kind) is None and FINDING_BY_NAME[f.kind].priced:
            out[f.kind] = WhatIf.of({"kernels": max(0.0, 1.0 - f.ms_per_step / kernel_ms)})
    return out
