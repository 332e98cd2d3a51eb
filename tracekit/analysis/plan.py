"""The fix plan: which fixes to make, in which order, and the step time after each one.

Each finding is priced on its own (:mod:`.pricing`), but fixes interact: removing a sync that
keeps the host from loading ahead saves what fixing the DataLoader saves, and after either the
other saves nothing; fp32 GEMMs hidden behind a slow DataLoader save nothing today and halve
the step once the loader keeps up.  The plan therefore replays the fixes *together*:

* the candidates are the findings' fixes (each kind's replay :class:`~.causes.Edit` in the
  registry), the fixes the replay may find on its own even when no finding reports them
  (``FindingKind.replay_finds``: a pageable copy that only pays once the loader has workers),
  and the efficiency fixes (AMP/TF32, fusing elementwise chains, larger GEMMs), whose edits
  scale the GPU kernels they speed up (:func:`efficiency_edit`);
* each greedy round replays, in one call of the prepared :class:`~.replay.Replayer`, every
  remaining candidate combined (:meth:`~.causes.Edit.all_of`) with the steps already chosen,
  and the candidate that saves the most on top of them becomes the next step;
* a candidate whose saving vanishes once a step is applied, and whose saving alone was about
  that step's (within :data:`SAME_SAVING`), is that step's *alternative* ("dropping the
  per-step ``.item()`` gives the same 40 ms instead"), not a step of its own;
* the plan stops when the best remaining candidate adds less than :data:`MIN_STEP_SHARE` of
  the step, and says what bounds the step then (:class:`Bound`).

Steps are stated on the headline's statistic, the median step; when a fix removes a cause
present in only some steps (:data:`.replay.INTERMITTENT_SHARE`: the median step does not see
it, and its finding costs its mean saving) the whole plan is stated on the mean steady step
instead (:attr:`Plan.statistic`), so that no number mixes the two.  Where the replay does not reproduce the trace
(:data:`.replay.TRUST_ERROR`) there is no plan: the fixes' combined effect is not priced, and
:attr:`Plan.note` says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from .causes import ACTIONS, FINDING_BY_NAME, REPLAY_TENSOR_CORE_SPEEDUP, Edit, cause_label, fix_edit
from .codeloc import CodeLocation
from .efficiency import Efficiency
from .findings import MIN_SHARE, Finding
from .kernels import KernelStats
from .replay import INTERMITTENT_SHARE, Replay, Replayer

#: a step must add at least this share of the step time (the plan stops before it)
MIN_STEP_SHARE = 0.02
#: a candidate's saving alone within this share of a step's saving (or within
#: :data:`MIN_STEP_SHARE` of the step) is "the same saving": the candidate is that step's
#: alternative when its saving vanishes once the step is applied
SAME_SAVING = 0.10
#: GPU busy share from which the step is bound by the GPU's own work
GPU_BOUND_UTILIZATION = 0.90
#: :attr:`Plan.priced_by` when the replay priced it
REPLAY = "replay"


@dataclass(frozen=True)
class PlanStep:
    """One fix of the plan, priced with every earlier step applied."""

    #: the finding kind whose fix it is
    kind: str
    #: the finding it fixes (its title, evidence and, once findings carry one, its code location)
    finding: Finding
    #: the median step with this fix and every earlier one applied, ms
    predicted_step_ms: float
    #: what it saves on top of the earlier steps, ms per step
    saves_ms: float
    #: what it would save alone (the finding's own price under the plan's model), ms per step
    saves_alone_ms: float
    #: GPU busy share of the predicted step (None: unknown, a CPU-only trace)
    gpu_utilization: float | None
    #: samples per second after it (None: the batch size is unknown)
    throughput: float | None
    #: kinds whose fix saves about the same alone and nothing once this one is made
    alternatives: tuple[str, ...] = ()

    @property
    def action(self) -> str:
        """The fix in a few words (the registry's ``action``, else the finding's title)."""
        return ACTIONS.get(self.kind) or self.finding.title

    @property
    def location(self) -> CodeLocation | None:
        """Where in the user's code the finding's cause is (None: the trace has no stacks)."""
        return self.finding.location

    def to_dict(self) -> dict[str, Any]:
        loc = self.location
        return {
            "kind": self.kind,
            "title": self.finding.title,
            "action": self.action,
            "predicted_step_ms": round(self.predicted_step_ms, 4),
            "saves_ms": round(self.saves_ms, 4),
            "saves_alone_ms": round(self.saves_alone_ms, 4),
            "gpu_utilization": None if self.gpu_utilization is None else round(self.gpu_utilization, 4),
            "throughput_per_s": None if self.throughput is None else round(self.throughput, 2),
            "alternatives": list(self.alternatives),
            "location": None if loc is None else loc.to_dict(),
        }


@dataclass(frozen=True)
class Bound:
    """What bounds the step once the plan is applied."""

    #: ``gpu`` (the GPU's own work), ``communication`` or ``host``
    what: str
    #: the words reports use ("GPU compute at 41% of the roofline")
    text: str
    #: the GPU work's share of its attainable roofline throughput (None: unknown)
    roofline_share: float | None = None


@dataclass(frozen=True)
class Plan:
    """The ordered fixes of one trace (empty: nothing worth fixing, or not priced: :attr:`note`)."""

    steps: tuple[PlanStep, ...]
    #: the step time today (the :attr:`statistic` step, ms) and the GPU busy share today
    step_ms: float | None
    gpu_utilization: float | None
    #: what bounds the step after the last step (None: no step time)
    bound: Bound | None
    #: :data:`REPLAY`, or None when the plan was not priced
    priced_by: str | None
    #: why there is no plan, when there is none although findings exist
    note: str | None = None
    #: the batch size the throughput is computed from (None: unknown)
    batch_size: int | None = None
    #: the trace's findings (the opening sentence names the largest when there is no plan)
    findings: tuple[Finding, ...] = field(default_factory=tuple)
    #: the step the plan's times describe: ``median`` (the headline's), or ``mean`` (the mean
    #: steady step) when a fix removes a stall present in only some steps
    statistic: str = "median"

    @property
    def predicted_step_ms(self) -> float | None:
        """The step with every fix of the plan applied."""
        return self.steps[-1].predicted_step_ms if self.steps else self.step_ms

    def sentence(self) -> str | None:
        """The answer in one sentence: the main cause, its cost, the first fix and the step
        before → after, GPU busy before → after (None: the trace has no step time)."""
        if self.step_ms is None:
            return None
        if self.steps:
            first = self.steps[0]
            busy = _busy(self.gpu_utilization, first.gpu_utilization)
            return (
                f"{_lead(self.gpu_utilization, first.finding, self._step_words)} ({first.saves_ms:.1f} ms per step): "
                f"{first.action}{_where(first.finding)}, "
                f"and the {self._step_words} would go from {self.step_ms:.1f} to {first.predicted_step_ms:.1f} ms{busy}."
            )
        if self.findings and self.note:
            top = self.findings[0]
            return f"{_lead(self.gpu_utilization, top)} ({top.ms_per_step:.1f} ms per step): {ACTIONS.get(top.kind) or top.fix}{_where(top)}."
        bound = f", bound by {self.bound.text}" if self.bound is not None else ""
        util = "" if self.gpu_utilization is None else f", GPU busy {self.gpu_utilization:.0%}"
        return f"Nothing worth fixing: no fix saves {MIN_STEP_SHARE:.0%} of the {self.step_ms:.1f} ms step{util}{bound}."

    @property
    def _step_words(self) -> str:
        return "mean step" if self.statistic == "mean" else "step"

    def to_list(self) -> list[dict[str, Any]]:
        return [s.to_dict() for s in self.steps]

    def with_findings(self, findings: Sequence[Finding]) -> Plan:
        """The plan with each step's finding replaced by the finding of its kind in ``findings``
        (the same findings once located in the user's code and reworded with the program's facts)."""
        by_kind = {f.kind: f for f in findings}
        steps = tuple(dataclasses.replace(st, finding=by_kind.get(st.kind, st.finding)) for st in self.steps)
        return dataclasses.replace(self, steps=steps, findings=tuple(findings))


def _lead(utilization: float | None, f: Finding, step: str = "step") -> str:
    what = f.title[0].lower() + f.title[1:]
    if utilization is None:
        return f"The main cause: {what}"
    if FINDING_BY_NAME[f.kind].cause:
        return f"The GPU is idle {1 - utilization:.0%} of {_each(step)}, mainly because {what}"
    return f"The GPU is busy {utilization:.0%} of {_each(step)}, and its work is slow: {what}"


def _each(step: str) -> str:
    return "each step" if step == "step" else f"the {step}"


def _where(f: Finding) -> str:
    """`` (file:line)`` of the finding's code location, or ''."""
    loc = f.location
    return "" if loc is None else f" ({loc.file}:{loc.line})"


def _busy(before: float | None, after: float | None) -> str:
    return "" if before is None or after is None else f" (GPU busy {before:.0%} → {after:.0%})"


@dataclass(frozen=True)
class PlanInputs:
    """What the plan reads of one priced trace."""

    findings: Sequence[Finding]
    #: the replay the findings were priced with (None: not replayed)
    replayer: Replayer | None
    trusted: bool
    step_ms: float | None
    utilization: float | None
    efficiency: Efficiency
    kernels: KernelStats
    #: breakdown cause → ms in the median step (what bounds the step when the host does)
    breakdown_ms: Mapping[str, float]
    #: candidates no finding reports (the replay may find them), with the finding each would be
    unreported: Mapping[str, Finding] = field(default_factory=dict)
    batch_size: int | None = None


def no_plan(step_ms: float | None, utilization: float | None, findings: Sequence[Finding] = (), note: str | None = None) -> Plan:
    """A plan with no step (nothing priced together; ``note``: why)."""
    return Plan(steps=(), step_ms=step_ms, gpu_utilization=utilization, bound=None, priced_by=None, note=note, findings=tuple(findings))


def build_plan(x: PlanInputs) -> Plan:
    """The greedy fix plan of one trace (see the module docstring)."""
    step_ms = x.step_ms
    if step_ms is None or not step_ms:
        return no_plan(step_ms, x.utilization, x.findings)
    if x.replayer is None or not x.trusted:
        note = (
            "The replay does not reproduce this trace closely enough to price fixes together; "
            "each finding's saving is its own and they do not add up."
            if x.findings else None
        )
        return no_plan(step_ms, x.utilization, x.findings, note)
    findings = {f.kind: f for f in x.findings}
    candidates = _candidates(x)
    chosen: list[tuple[str, Edit]] = []
    steps: list[PlanStep] = []
    alone: dict[str, float] = {}
    mean = False
    predicted = base = step_ms
    while candidates:
        edits = [Edit.all_of(*(e for _, e in chosen), e) for _, e in candidates]
        r = x.replayer.run(edits)
        if not chosen:
            # a cause in only some steps: the whole plan is stated on the mean steady step
            mean = any(_intermittent(r, e.label, step_ms) for e in edits)
            predicted = base = (r.mean_steady_ms("measured_ns") or step_ms) if mean else step_ms
        totals = {kind: base - _drop(r, e.label, base, mean) for (kind, _), e in zip(candidates, edits, strict=True)}
        labels = {kind: e.label for (kind, _), e in zip(candidates, edits, strict=True)}
        added = {k: max(0.0, predicted - t) for k, t in totals.items()}
        if not chosen:
            alone = dict(added)
        else:
            _mark_alternatives(steps, candidates, added, alone, step_ms)
            candidates = [c for c in candidates if c[0] not in steps[-1].alternatives]
            if not candidates:
                break
        # savings within 1% of the step tie (as the findings' ranking has them): the earlier
        # candidate — the findings' order — wins
        best = min(enumerate(candidates), key=lambda ic: (-round(added[ic[1][0]] / step_ms, 2), ic[0]))[1][0]
        if added[best] < MIN_STEP_SHARE * step_ms:
            break
        if best not in findings and added[best] < MIN_SHARE * step_ms:
            break  # a fix no finding reports enters the plan only when it pays a finding's share
        total = totals[best]
        steps.append(PlanStep(
            kind=best, finding=findings.get(best) or x.unreported[best], predicted_step_ms=total, saves_ms=predicted - total,
            saves_alone_ms=alone.get(best, 0.0), gpu_utilization=_utilization_after(r, labels[best], x.utilization, step_ms, total),
            throughput=None if x.batch_size is None else x.batch_size * 1000.0 / total,
        ))
        chosen.append((best, dict(candidates)[best]))
        candidates = [c for c in candidates if c[0] != best]
        predicted = total
    return Plan(
        # the GPU's busy time per step is today's median step's busy share of it; over the mean step it is a smaller share
        steps=tuple(steps), step_ms=base, gpu_utilization=None if x.utilization is None else x.utilization * step_ms / base,
        statistic="mean" if mean else "median",
        bound=_bound(x, [s.kind for s in steps], steps[-1].gpu_utilization if steps else x.utilization),
        priced_by=REPLAY, batch_size=x.batch_size, findings=tuple(x.findings),
    )


def _mark_alternatives(
    steps: list[PlanStep], candidates: Sequence[tuple[str, Edit]], added: Mapping[str, float], alone: Mapping[str, float], step_ms: float
) -> None:
    """The candidates that add nothing next to the last step and saved about what it saves
    alone become its alternatives (``steps[-1]`` is replaced)."""
    last = steps[-1]
    same = max(SAME_SAVING * last.saves_ms, MIN_STEP_SHARE * step_ms)
    alts = [
        k for k, _ in candidates
        if k not in last.alternatives and added[k] < MIN_STEP_SHARE * step_ms
        and alone.get(k, 0.0) >= MIN_STEP_SHARE * step_ms and abs(alone.get(k, 0.0) - last.saves_ms) <= same
    ]
    if alts:
        steps[-1] = dataclasses.replace(last, alternatives=last.alternatives + tuple(alts))


def _intermittent(r: Replay, label: str, step_ms: float) -> bool:
    """The edit's mean saving over the steady steps exceeds its saving in the median step by
    :data:`INTERMITTENT_SHARE` of the step: a cause in only some steps, which the median step
    does not see (its finding states the mean saving too)."""
    return (r.mean_saving_ms(label) or 0.0) - (r.saving_ms(label) or 0.0) >= INTERMITTENT_SHARE * step_ms


def _drop(r: Replay, label: str, base: float, mean: bool) -> float:
    """The edit's saving per step on the plan's statistic: the drop of the median replayed step,
    or of the mean steady step (never more than the step)."""
    return min((r.mean_saving_ms(label) if mean else r.saving_ms(label)) or 0.0, base)


def _utilization_after(r: Replay, label: str, before: float | None, step_ms: float, predicted: float) -> float | None:
    """The GPU's busy share of the predicted step: today's busy time per step (``before`` of
    the median step ``step_ms``) scaled by what the edit leaves of the GPU's work in the replay."""
    ratio = r.gpu_busy_ratio(label)
    if before is None or ratio is None or predicted <= 0:
        return None
    return min(1.0, before * step_ms * ratio / predicted)


def _candidates(x: PlanInputs) -> list[tuple[str, Edit]]:
    """(kind, edit) of every fix the plan may choose, in the findings' order, then the
    unreported kinds the replay may find; efficiency fixes get :func:`efficiency_edit`."""
    out: list[tuple[str, Edit]] = []
    for f in [*x.findings, *x.unreported.values()]:
        if any(k == f.kind for k, _ in out) or FINDING_BY_NAME[f.kind].job:
            continue
        edit = fix_edit(f.kind) or efficiency_edit(f, x.efficiency, x.kernels)
        if edit is not None:
            out.append((f.kind, edit))
    return out


def efficiency_edit(f: Finding, eff: Efficiency, kernels: KernelStats) -> Edit | None:
    """The replay edit of an efficiency finding's fix (None: not an efficiency kind it models).

    * fp32 GEMMs (``fp32_gemm``): the tensor-core fix the registry models for fp32 kernels found
      by name (``no_tensor_cores``: their kernels ÷ :data:`REPLAY_TENSOR_CORE_SPEEDUP`) when the
      trace names them; otherwise every compute kernel scaled to lose that share of the fp32
      GEMMs' time;
    * fusing elementwise chains, larger GEMMs: the compute kernels scaled so that they lose the
      finding's cost per step (fused chains are not fp32 GEMMs: only the other kernels scale).
    """
    kernel_ms = _kernel_ms(eff)
    if kernel_ms <= 0 or f.kind not in ("fp32_gemm", "small_gemm", "unfused_elementwise"):
        return None
    if f.kind == "fp32_gemm":
        named = fix_edit("no_tensor_cores")
        if named is not None and kernels.fp32_matmul_time_ns > 0:
            return dataclasses.replace(named, label=f.kind)
        fp32_ms = float(f.evidence.get("fp32_ms_per_step") or 0.0)
        cost = fp32_ms * (1.0 - 1.0 / REPLAY_TENSOR_CORE_SPEEDUP)
        factor = max(0.0, 1.0 - cost / kernel_ms)
        return Edit(f.kind, gpu={"kernel": factor, "fp32_matmul": factor})
    if f.kind == "unfused_elementwise":
        fp32_share = kernels.fp32_matmul_time_ns / kernels.kernel_time_ns if kernels.kernel_time_ns else 0.0
        other_ms = kernel_ms * (1.0 - fp32_share)
        return Edit(f.kind, gpu={"kernel": max(0.0, 1.0 - f.ms_per_step / other_ms)}) if other_ms > 0 else None
    factor = max(0.0, 1.0 - f.ms_per_step / kernel_ms)
    return Edit(f.kind, gpu={"kernel": factor, "fp32_matmul": factor})


def _kernel_ms(eff: Efficiency) -> float:
    """Compute kernel time per complete step (ms; 0 when the efficiency analysis has none)."""
    steps = eff.per_step
    if steps.height == 0 or "kernel_ns" not in steps.columns:
        return 0.0
    counted = steps.filter(pl.col("complete")) if steps.filter(pl.col("complete")).height else steps
    return float(counted["kernel_ns"].sum()) / max(counted.height, 1) / 1e6


def _bound(x: PlanInputs, fixed: Sequence[str], utilization: float | None) -> Bound:
    """What bounds the step after the fixes in ``fixed``: the GPU's own work when it is busy
    most of the step (with its place on the roofline where shapes were recorded), else the
    largest idle cause the plan leaves (communication, or a host cause)."""
    left = {c: ms for c, ms in x.breakdown_ms.items() if c not in fixed and c != "compute" and ms > 0}
    if utilization is None or utilization >= GPU_BOUND_UTILIZATION or not left:
        share = roofline_share(x.efficiency)
        where = "" if share is None else f" at {share:.0%} of the roofline"
        return Bound("gpu", f"GPU compute{where}", share)
    worst = max(left, key=lambda c: (round(left[c], 6), c))
    if worst == "exposed_communication":
        return Bound("communication", f"communication ({left[worst]:.1f} ms per step exposed)")
    return Bound("host", f"the host: {cause_label(worst)} ({left[worst]:.1f} ms per step)")


def roofline_share(eff: Efficiency) -> float | None:
    """The modelled operators' GPU-time-weighted share of their attainable throughput on the
    device's roofline (None: no shapes or no peaks)."""
    ops = eff.ops
    if not eff.available or ops.height == 0 or "pct_of_attainable" not in ops.columns:
        return None
    rated = ops.drop_nulls(["pct_of_attainable", "gpu_ns"]).filter(pl.col("gpu_ns") > 0)
    total = float(rated["gpu_ns"].sum()) if rated.height else 0.0
    if not total:
        return None
    # an operator recorded faster than its roofline (peaks of another device) counts as at it
    return float((rated["pct_of_attainable"].clip(upper_bound=1.0) * rated["gpu_ns"]).sum()) / total


__all__ = ["Bound", "Plan", "PlanInputs", "PlanStep", "build_plan", "efficiency_edit", "no_plan", "roofline_share"]
