"""Before/after comparison of two diagnoses: what a change to the training loop did.

:func:`compare` takes two :class:`~tracekit.analysis.Diagnosis` objects — from any mix of
Kineto and Nsight inputs, since both are diagnosed from the same canonical tables — and
returns a frozen :class:`DiffResult`: step time, GPU utilization, each cause's milliseconds
per step, the findings (fixed, new, better, worse) and the top kernels side by side, with
the deltas, and a verdict with its reasons: ``faster`` or ``slower`` when the median step
time moved by more than the noise floor set by both traces' step-to-step spread,
``within_noise`` when it did not, ``not_comparable`` when the step times do not measure the
same thing (steps found by different sources or by periodicity, too few complete steps,
different devices or rank counts).  When the traces record operator shapes, MFU and the
model TFLOP/s are compared too (:class:`EfficiencyChange`), and the efficiency findings
(fp32 GEMMs, small GEMMs, unfused elementwise chains) take part in the findings comparison;
a side that cannot measure them (no shapes, unknown GPU) says so instead of counting them as
fixed.  Nothing here reads files or prints.

Conventions: ``delta`` is ``after - before`` (negative step-time delta = faster);
``delta_pct`` is the delta relative to ``before`` in percent.  Kernel time per step is the
kernel's total time in the trace divided by the number of step windows.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from .causes import CAUSES, SUPERSEDES, LiveMapping
from .efficiency import Efficiency, efficiency_findings
from .results import Diagnosis

#: step-time changes within this many percent are "within noise" however steady the steps are
UNCHANGED_PCT = 1.0
#: complete steps each side needs for its step time to be compared at all
MIN_COMPARABLE_STEPS = 3
#: the noise floor is this many combined standard errors of the two median step times
NOISE_SIGMAS = 2.0
#: step sources whose windows are not training iterations: their "step time" is no step time
NOT_ITERATIONS = {"periodicity": "a kernel's period found by periodicity", "whole_trace": "the whole trace as one window"}
#: step sources that cut the same iterations: explicit step markers (torch.profiler's or the
#: user's/NVTX), or boundaries derived from the loop's own calls
SOURCE_FAMILY = {"profiler_step": "markers", "user_step": "markers", "optimizer": "derived", "dataloader": "derived"}
#: a finding whose cost moved by less than this share of its before value (or 0.05 ms) is unchanged
FINDING_UNCHANGED_SHARE = 0.05
FINDING_UNCHANGED_MS = 0.05
#: kernels listed in the comparison (by the larger of before/after time per step)
TOP_KERNELS = 15
#: findings measured from operator shapes (analysis/efficiency.py), and what each needs beyond shapes
EFFICIENCY_KINDS = {"fp32_gemm": "peaks", "small_gemm": "peaks", "unfused_elementwise": "shapes"}
#: a finding kind → the kind that replaces it when both can be measured (the registry's
#: ``FindingKind.supersedes``: ``no_tensor_cores`` → ``fp32_gemm`` when shapes are recorded; the
#: same cause measured another way: a side reporting one is not compared with the other's cost)
SAME_CAUSE = LiveMapping(lambda: {old: new for new, old in SUPERSEDES.items()})


@dataclass(frozen=True)
class Change:
    """One quantity before and after; ``delta``/``delta_pct`` are None when a side is missing."""

    before: float | None
    after: float | None
    delta: float | None
    delta_pct: float | None

    @classmethod
    def of(cls, before: float | None, after: float | None) -> Change:
        delta = None if before is None or after is None else after - before
        pct = None if delta is None or not before else 100.0 * delta / before
        return cls(before=before, after=after, delta=delta, delta_pct=pct)


@dataclass(frozen=True)
class DiffSide:
    """What one of the two traces is."""

    path: str
    format: str
    format_version: str | None
    devices: tuple[str, ...]
    steps: int
    complete_steps: int
    step_source: str | None
    world_size: int | None


@dataclass(frozen=True)
class CauseChange:
    cause: str
    ms_per_step: Change
    share: Change


@dataclass(frozen=True)
class EfficiencyChange:
    """MFU and the model FLOP rate before and after (docs/efficiency.md).

    ``mfu`` is a share of the peak (0..1; ``delta`` in share points), each side against the peak
    of the dtype that carries most of its FLOPs; ``model_tflops`` is the model FLOPs per second
    of step time, comparable across dtypes.
    """

    mfu: Change
    model_tflops: Change
    #: dtype each side's MFU is measured against, and its peak (TFLOP/s)
    mfu_dtype_before: str | None
    mfu_dtype_after: str | None
    peak_tflops_before: float | None
    peak_tflops_after: float | None
    #: each side's MFU headline (``MFU 41.2% of the bf16 peak ...`` or ``MFU n/a: why``)
    headline_before: str
    headline_after: str
    #: why the MFU change is missing (a side has no MFU, and why); None when both sides have one
    reason: str | None = None
    #: why the MFU change needs care though both sides have one (different peaks)
    caveat: str | None = None


def _no_efficiency() -> EfficiencyChange:
    empty = Change.of(None, None)
    return EfficiencyChange(empty, empty, None, None, None, None, "MFU n/a", "MFU n/a", reason="not compared")


@dataclass(frozen=True)
class FindingChange:
    kind: str
    title: str
    #: ``fixed`` (only before), ``new`` (only after), ``better``, ``worse``, ``unchanged`` or
    #: ``not_measured`` (a finding the other side could not have reported: an efficiency finding
    #: where it records no operator shapes or its GPU is not in the peak table, or
    #: ``no_tensor_cores`` where that side reports the same cause as ``fp32_gemm``)
    status: str
    #: the finding's cost; for a cause reported on one side only, the other side is that
    #: cause's ms per step from the breakdown (below the reporting threshold); for an efficiency
    #: finding, its cost measured without the threshold (0 when none is left); None when unknown
    ms_per_step: Change
    predicted_step_ms: Change
    fix: str


@dataclass(frozen=True)
class KernelChange:
    name: str
    category: str | None
    #: None on a side where the kernel is not among the trace's top kernels
    ms_per_step: Change
    count_per_step: Change


@dataclass(frozen=True)
class PlanCheck:
    """Which step of BEFORE's fix plan the change made, and the step it predicted against
    AFTER's measured one."""

    #: the plan step reached (1-based): every step up to it is fixed in AFTER
    step: int
    #: the kinds of the steps reached, in plan order
    kinds: tuple[str, ...]
    #: step kind → the alternative that made it instead (when that is how it was fixed)
    via: dict[str, str]
    predicted_ms: float
    measured_ms: float

    @property
    def error_pct(self) -> float:
        """Measured against predicted, in percent of the prediction (positive: slower than predicted)."""
        return 100.0 * (self.measured_ms - self.predicted_ms) / self.predicted_ms if self.predicted_ms else 0.0

    def sentence(self) -> str:
        ways = ", ".join(f"{k} (by fixing {self.via[k]} instead)" if k in self.via else k for k in self.kinds)
        what = f"step {self.step} of the before plan" if self.step == 1 else f"steps 1-{self.step} of the before plan"
        return (f"The change matches {what} ({ways}): predicted {self.predicted_ms:,.1f} ms, "
                f"measured {self.measured_ms:,.1f} ms, {round(self.error_pct, 1) + 0.0:+.1f}%.")


def plan_check(before: Diagnosis, after: Diagnosis) -> PlanCheck | None:
    """The longest prefix of BEFORE's plan whose every step is fixed in AFTER — its kind, or one
    of its alternatives, was found before and AFTER neither reports nor plans it — with the step it predicted
    (None: the change fixed no plan step, or a side has no step time)."""
    if after.step_ms_median is None or not before.plan.steps:
        return None
    found_before = {f.kind for f in before.findings} | {st.kind for st in before.plan.steps}
    # a kind is still to fix when AFTER reports it or plans it (fp32 GEMMs hidden behind a
    # loader that still stalls are no finding there, but a later step of its plan)
    remaining = {f.kind for f in after.findings} | {k for st in after.plan.steps for k in (st.kind, *st.alternatives)}
    fixed = found_before - remaining
    reached: list[str] = []
    via: dict[str, str] = {}
    for st in before.plan.steps:
        if st.kind in fixed:
            reached.append(st.kind)
            continue
        alt = next((a for a in st.alternatives if a not in remaining), None)
        if alt is None:
            break
        reached.append(st.kind)
        via[st.kind] = alt
    if not reached:
        return None
    predicted = before.plan.steps[len(reached) - 1].predicted_step_ms
    return PlanCheck(step=len(reached), kinds=tuple(reached), via=via, predicted_ms=predicted, measured_ms=after.step_ms_median)


@dataclass(frozen=True)
class DiffResult:
    """Everything :func:`compare` concluded (see the module docstring)."""

    before: DiffSide
    after: DiffSide
    #: median step time over complete steps, ms
    step_ms: Change
    step_ms_mean: Change
    #: busy share 0..1; ``delta`` in share points (0.1 = 10 percentage points)
    gpu_utilization: Change
    causes: tuple[CauseChange, ...]
    findings: tuple[FindingChange, ...]
    kernels: tuple[KernelChange, ...]
    sync_points_per_step: Change
    kernels_per_step: Change
    median_kernel_us: Change
    #: ``faster``, ``slower``, ``within_noise`` (the change is inside :attr:`noise_pct`) or
    #: ``not_comparable`` (see :attr:`verdict_reasons`)
    verdict: str
    notes: tuple[str, ...]
    #: why the verdict is what it is (for ``not_comparable``: every reason found)
    verdict_reasons: tuple[str, ...] = ()
    #: the noise floor in percent of BEFORE's step time (None when a side has no step time)
    noise_pct: float | None = None
    #: MFU and model TFLOP/s before and after
    efficiency: EfficiencyChange = field(default_factory=_no_efficiency)
    #: which step of BEFORE's fix plan the change made, predicted vs measured (None: none)
    plan: PlanCheck | None = None

    def slower_than(self, pct: float) -> bool:
        """True when the after step time is slower than before by more than ``pct`` percent
        *and* by more than the noise floor (a change inside the noise is no regression)."""
        if self.step_ms.delta_pct is None or self.verdict == "not_comparable":
            return False
        return self.step_ms.delta_pct > max(pct, self.noise_pct or 0.0)


def compare(before: Diagnosis, after: Diagnosis) -> DiffResult:
    """Side-by-side deltas of two diagnoses (see the module docstring)."""
    step_ms = Change.of(before.step_ms_median, after.step_ms_median)
    verdict, reasons, noise = _verdict(before, after, step_ms)
    causes = tuple(
        CauseChange(
            cause=c,
            ms_per_step=Change.of(before.breakdown_ms.get(c) if before.breakdown_ms else None,
                                  after.breakdown_ms.get(c) if after.breakdown_ms else None),
            share=Change.of(before.breakdown.get(c) if before.breakdown else None,
                            after.breakdown.get(c) if after.breakdown else None),
        )
        for c in CAUSES
    )
    b_kernels, a_kernels = before.kernels, after.kernels
    return DiffResult(
        before=_side(before),
        after=_side(after),
        step_ms=step_ms,
        step_ms_mean=Change.of(before.step_ms_mean, after.step_ms_mean),
        gpu_utilization=Change.of(before.gpu_utilization, after.gpu_utilization),
        causes=causes,
        findings=_findings(before, after),
        kernels=_kernels(before, after),
        sync_points_per_step=Change.of(_syncs_per_step(before), _syncs_per_step(after)),
        kernels_per_step=Change.of(_per_window(before, b_kernels.kernel_count), _per_window(after, a_kernels.kernel_count)),
        median_kernel_us=Change.of(
            None if b_kernels.median_kernel_ns is None else b_kernels.median_kernel_ns / 1e3,
            None if a_kernels.median_kernel_ns is None else a_kernels.median_kernel_ns / 1e3,
        ),
        verdict=verdict,
        notes=tuple(_notes(before, after)),
        verdict_reasons=reasons,
        noise_pct=noise,
        efficiency=_efficiency_change(before.efficiency, after.efficiency),
        plan=plan_check(before, after),
    )


def _efficiency_change(before: Efficiency, after: Efficiency) -> EfficiencyChange:
    """MFU and model TFLOP/s side by side, with why a missing MFU is missing."""
    missing = [(label, e.reason or "not measured") for label, e in (("before", before), ("after", after)) if e.mfu is None]
    reason = None
    if len(missing) == 2 and missing[0][1] == missing[1][1]:
        reason = f"both traces: {missing[0][1]}"
    elif missing:
        reason = "; ".join(f"{label}: {why}" for label, why in missing)
    caveat = None
    if before.mfu is not None and after.mfu is not None and (before.mfu_dtype, before.peak_tflops) != (after.mfu_dtype, after.peak_tflops):
        caveat = (
            f"MFU is measured against different peaks ({before.mfu_dtype} {before.peak_tflops:g} TFLOP/s before, "
            f"{after.mfu_dtype} {after.peak_tflops:g} TFLOP/s after): the model TFLOP/s compare the work done"
        )
    return EfficiencyChange(
        mfu=Change.of(before.mfu, after.mfu),
        model_tflops=Change.of(before.achieved_tflops, after.achieved_tflops),
        mfu_dtype_before=before.mfu_dtype,
        mfu_dtype_after=after.mfu_dtype,
        peak_tflops_before=before.peak_tflops,
        peak_tflops_after=after.peak_tflops,
        headline_before=before.headline,
        headline_after=after.headline,
        reason=reason,
        caveat=caveat,
    )


def _steady_ms(d: Diagnosis) -> list[float]:
    return [float(x) / 1e6 for x in d.steps.filter(pl.col("complete"))["dur_ns"].to_list()] if d.steps.height else []


def noise_floor_pct(before_ms: Sequence[float], after_ms: Sequence[float]) -> float | None:
    """The smallest step-time change, in percent of BEFORE's median, that the step-to-step
    spread of both traces lets one tell from noise.

    Each side's spread is a robust standard deviation (1.4826 × the median absolute
    deviation); the standard error of its median is 1.2533 × spread / √n.  The floor is
    :data:`NOISE_SIGMAS` times the two errors combined, and never below :data:`UNCHANGED_PCT`.
    """
    if not before_ms or not after_ms:
        return None
    b_med = statistics.median(before_ms)
    if b_med <= 0:
        return None

    def se(xs: Sequence[float]) -> float:
        med = statistics.median(xs)
        mad = statistics.median(abs(x - med) for x in xs)
        return 1.2533 * 1.4826 * mad / math.sqrt(len(xs))

    combined = math.sqrt(se(before_ms) ** 2 + se(after_ms) ** 2)
    return max(UNCHANGED_PCT, 100.0 * NOISE_SIGMAS * combined / b_med)


def _verdict(before: Diagnosis, after: Diagnosis, step_ms: Change) -> tuple[str, tuple[str, ...], float | None]:
    """faster / slower / within_noise / not_comparable, with the reasons (see :class:`DiffResult`)."""
    b, a = _side(before), _side(after)
    reasons: list[str] = []
    for label, side in (("before", b), ("after", a)):
        if side.complete_steps < MIN_COMPARABLE_STEPS:
            reasons.append(
                f"too few complete steps in the {label} trace ({side.complete_steps}; at least {MIN_COMPARABLE_STEPS} are needed "
                "to tell a change from step-to-step noise)"
            )
        if side.step_source in NOT_ITERATIONS:
            reasons.append(f"the {label} trace's steps are {NOT_ITERATIONS[side.step_source]}, not training iterations (no step markers)")
    if (
        b.step_source != a.step_source and b.step_source and a.step_source
        and SOURCE_FAMILY.get(b.step_source, b.step_source) != SOURCE_FAMILY.get(a.step_source, a.step_source)
    ):
        reasons.append(f"steps were found by different sources ({b.step_source} before, {a.step_source} after)")
    if b.devices and a.devices and b.devices != a.devices:
        reasons.append(f"different devices ({', '.join(b.devices)} before, {', '.join(a.devices)} after)")
    if b.world_size and a.world_size and b.world_size != a.world_size:
        reasons.append(f"different rank counts ({b.world_size} before, {a.world_size} after)")
    noise = noise_floor_pct(_steady_ms(before), _steady_ms(after))
    if step_ms.delta_pct is None:
        if not any("complete steps" in r for r in reasons):
            reasons.append("a trace has no complete step, so it has no step time")
        return "not_comparable", tuple(reasons), noise
    if reasons:
        return "not_comparable", tuple(reasons), noise
    assert noise is not None
    change = f"the median step time moved {step_ms.delta_pct:+.1f}%"
    if abs(step_ms.delta_pct) <= noise:
        return "within_noise", (f"{change}, inside the noise floor of ±{noise:.1f}% set by the step-to-step spread",), noise
    word = "faster" if step_ms.delta_pct < 0 else "slower"
    return word, (f"{change}, beyond the noise floor of ±{noise:.1f}%",), noise


def _side(d: Diagnosis) -> DiffSide:
    names: tuple[str, ...] = ()
    if d.devices.height and "name" in d.devices.columns:
        used = d.timeline.per_step.select("device").unique()
        devs = d.devices.join(used, on="device", how="semi") if used.height else d.devices
        names = tuple(sorted({str(n) for n in devs["name"].drop_nulls().to_list() if n}))
    sources = sorted(set(d.step_sources.values()))
    return DiffSide(
        path=d.info.path,
        format=d.info.format,
        format_version=d.info.format_version,
        devices=names,
        steps=int(d.steps.height),
        complete_steps=d.complete_steps,
        step_source=sources[0] if sources else None,
        world_size=d.info.world_size,
    )


def _per_window(d: Diagnosis, value: float) -> float | None:
    return None if d.steps.height == 0 else value / d.steps.height


def _syncs_per_step(d: Diagnosis) -> float | None:
    if d.steps.height == 0:
        return None
    in_steps = d.syncs.filter(pl.col("step").is_not_null()).height if d.syncs.height else 0
    return in_steps / max(d.complete_steps, 1)


def _findings(before: Diagnosis, after: Diagnosis) -> tuple[FindingChange, ...]:
    b = {f.kind: f for f in before.findings}
    a = {f.kind: f for f in after.findings}
    unreported = {"before": _EfficiencyCosts(before), "after": _EfficiencyCosts(after)}
    out: list[FindingChange] = []
    for kind in sorted(set(b) | set(a)):
        fb, fa = b.get(kind), a.get(kind)
        ms_b = fb.ms_per_step if fb else unreported["before"].ms(kind)
        ms_a = fa.ms_per_step if fa else unreported["after"].ms(kind)
        ms = Change.of(ms_b, ms_a)
        if fa is None:
            status = "not_measured" if _unmeasured(kind, a, unreported["after"]) else "fixed"
        elif fb is None:
            status = "not_measured" if _unmeasured(kind, b, unreported["before"]) else "new"
        elif ms.delta is not None and abs(ms.delta) <= max(FINDING_UNCHANGED_MS, FINDING_UNCHANGED_SHARE * (ms_b or 0.0)):
            status = "unchanged"
        else:
            status = "better" if (ms.delta or 0.0) < 0 else "worse"
        ref = fa or fb
        assert ref is not None
        out.append(
            FindingChange(
                kind=kind,
                title=ref.title,
                status=status,
                ms_per_step=ms,
                predicted_step_ms=Change.of(fb.predicted_step_ms if fb else None, fa.predicted_step_ms if fa else None),
                fix=ref.fix,
            )
        )
    return tuple(sorted(out, key=lambda f: (-max(f.ms_per_step.before or 0.0, f.ms_per_step.after or 0.0), f.kind)))


def _unmeasured(kind: str, reported: dict[str, Any], side: _EfficiencyCosts) -> bool:
    """A finding missing from a side that could not have reported it: an efficiency finding on a
    side without shapes or peaks, or the kernel-name finding a side reported as its dtype-based
    successor instead (``no_tensor_cores`` → ``fp32_gemm``)."""
    if kind in EFFICIENCY_KINDS:
        return not side.measures(kind)
    return kind in SAME_CAUSE and SAME_CAUSE[kind] in reported


class _EfficiencyCosts:
    """What a finding costs on a side that does not report it: a cause's ms per step from the
    breakdown (below the reporting threshold), an efficiency finding's cost measured without
    the threshold (0 when the side measures it and finds none), None when the side cannot tell."""

    def __init__(self, d: Diagnosis) -> None:
        self.d = d
        self._costs: dict[str, float] | None = None

    def measures(self, kind: str) -> bool:
        eff, need = self.d.efficiency, EFFICIENCY_KINDS.get(kind)
        if need is None or not eff.available or not self.d.step_ms_median or eff.per_step.height == 0:
            return False
        return need == "shapes" or eff.peaks is not None

    def ms(self, kind: str) -> float | None:
        if kind in CAUSES:
            return self.d.breakdown_ms.get(kind) if self.d.breakdown_ms else None
        if not self.measures(kind):
            return None
        if self._costs is None:
            found = efficiency_findings(self.d.efficiency, self.d.step_ms_median, 0.0)
            self._costs = {f.kind: f.ms_per_step for f in found}
        return self._costs.get(kind, 0.0)


def _kernel_table(d: Diagnosis) -> pl.DataFrame:
    windows = max(d.steps.height, 1)
    return d.kernels.top.select(
        "name",
        "category",
        (pl.col("total_ns") / 1e6 / windows).alias("ms"),
        (pl.col("count") / windows).alias("count"),
    )


def _kernels(before: Diagnosis, after: Diagnosis) -> tuple[KernelChange, ...]:
    b, a = _kernel_table(before), _kernel_table(after)
    both = b.join(a, on="name", how="full", coalesce=True, suffix="_after")
    both = both.with_columns(
        pl.coalesce("category", "category_after").alias("category"),
        pl.max_horizontal(pl.col("ms").fill_null(0.0), pl.col("ms_after").fill_null(0.0)).alias("_key"),
    ).sort(["_key", "name"], descending=[True, False]).head(TOP_KERNELS)
    return tuple(
        KernelChange(
            name=r["name"],
            category=r["category"],
            ms_per_step=Change.of(r["ms"], r["ms_after"]),
            count_per_step=Change.of(r["count"], r["count_after"]),
        )
        for r in both.iter_rows(named=True)
    )


def _notes(before: Diagnosis, after: Diagnosis) -> list[str]:
    b, a = _side(before), _side(after)
    notes: list[str] = []
    for label, side, d in (("before", b, before), ("after", a, after)):
        if side.complete_steps == 0:
            notes.append(f"The {label} trace has no complete step: step times cannot be compared.")
        if b.step_source != a.step_source and label == "after" and SOURCE_FAMILY.get(b.step_source or "") == SOURCE_FAMILY.get(a.step_source or ""):
            notes.append(f"Steps were marked differently (before: {b.step_source}, after: {a.step_source}); both are iteration markers.")
        if d.warmup.found:
            notes.append(f"The {label} trace starts with warm-up ({d.warmup.steps.height} step window(s)), left out of its step time.")
        if d.gpu_utilization is None:
            notes.append(f"The {label} trace has no GPU activity in its steps: utilization and idle causes cannot be compared.")
    for old, new in SAME_CAUSE.items():
        for x, y, lx, ly in ((before, after, "before", "after"), (after, before, "after", "before")):
            if any(f.kind == old for f in x.findings) and any(f.kind == new for f in y.findings):
                notes.append(
                    f"fp32 matrix math is reported as {old} {lx} (judged from kernel names) and as {new} {ly} (from the "
                    "operators' dtypes): the same cause measured two ways, so neither is counted as fixed or new."
                )
    if b.format != a.format:
        notes.append(f"Mixed inputs ({b.format} before, {a.format} after): both are read into the same tables and analysed alike.")
    return notes


__all__ = ["CauseChange", "Change", "DiffResult", "DiffSide", "EfficiencyChange", "FindingChange", "KernelChange", "compare"]
