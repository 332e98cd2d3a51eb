"""From measurements to findings: each cause with its cost per step, evidence and fix.

A finding is reported when its cause costs at least :data:`MIN_SHARE` of step time; when
the GPU is busy at least :data:`HEALTHY_UTILIZATION` of the time, idle-time causes are not
reported at all (a saturated GPU has no idle problem to fix).  :func:`build_findings` sorts
them by milliseconds per step; :func:`rank_by_saving` then ranks them by what fixing each
would save according to the critical path's what-if (``predicted_step_ms``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import polars as pl

from ..schema import LAUNCH_KINDS, EventKind
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
)
from .kernels import KernelStats
from .memory import MemoryHeadroom

if TYPE_CHECKING:
    from .whatif import WhatIfResult

#: a cause must cost at least this share of step time to be reported
MIN_SHARE = 0.05
#: GPU busy share from which idle-time causes are not reported
HEALTHY_UTILIZATION = 0.95
#: device memory unused at the peak from which a larger batch is recommended
LARGE_HEADROOM = 0.4
#: a median GEMM/convolution kernel shorter than this does too little work per launch
SMALL_GEMM_NS = 20_000




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
                kind, ms_per_step=ms, share_of_step=share, evidence=_evidence(kind, per_step, gaps, syncs, kernels, events),
                steps_affected=affected.height, worst_steps=tuple(int(s) for s in worst), host_only=host_only,
            )
        )
    # fp32 matrix multiplies on a tensor-core GPU
    if kernels.fp32_matmul_time_ns:
        span = windows_ns or int(per_step["dur_ns"].sum())
        share = min(kernels.fp32_matmul_time_ns / span, 1.0) if span else 0.0
        ms = share * step_ms
        if share >= MIN_SHARE:
            found.append(
                Finding(
                    kind="no_tensor_cores",
                    title=TITLES["no_tensor_cores"],
                    ms_per_step=ms,
                    share_of_step=share,
                    evidence={
                        "fp32_matmul_kernels": list(kernels.fp32_matmul_names),
                        "fp32_matmul_ms_total": round(kernels.fp32_matmul_time_ns / 1e6, 3),
                    },
                    fix=FIXES["no_tensor_cores"],
                    steps_affected=n_steps,
                )
            )
    # launch-bound with evidence of a small batch of its own: one finding, not two with the same ms
    found = _launch_or_small_batch(found, kernels, memory)
    order = {k: i for i, k in enumerate(FINDING_KINDS)}
    return sorted(found, key=lambda f: (-round(f.ms_per_step, 6), order[f.kind]))


def _launch_or_small_batch(found: list[Finding], kernels: KernelStats, memory: Sequence[MemoryHeadroom]) -> list[Finding]:
    """A launch-bound step whose batch is demonstrably small becomes one ``small_batch`` finding.

    The evidence must be the batch's own: most device memory unused at the peak
    (:data:`LARGE_HEADROOM`) *and* matrix multiplies too small to fill the GPU (median
    GEMM/convolution kernel under :data:`SMALL_GEMM_NS`, or fewer thread blocks than the GPU
    has SMs).  Without it the launch-bound finding stands alone; its fix names both remedies
    (a larger batch, CUDA graphs / compile), so nothing is reported twice with the same cost.
    """
    launch = next((f for f in found if f.kind == "launch_bound"), None)
    if launch is None:
        return found
    headroom = [m.headroom for m in memory if m.headroom is not None]
    roomy = bool(headroom) and min(headroom) >= LARGE_HEADROOM
    short_gemm = kernels.gemm_median_ns is not None and kernels.gemm_median_ns < SMALL_GEMM_NS
    narrow_gemm = (
        kernels.gemm_median_blocks is not None and kernels.sm_count is not None and kernels.gemm_median_blocks < kernels.sm_count
    )
    if not (roomy and kernels.gemm_count and (short_gemm or narrow_gemm)):
        return found
    evidence = {
        **launch.evidence,
        "memory_headroom": round(min(headroom), 3),
        "peak_reserved_gib": [round((m.peak_reserved_bytes or 0) / 2**30, 2) for m in memory],
        "gemm_kernels": kernels.gemm_count,
        "median_gemm_us": None if kernels.gemm_median_ns is None else round(kernels.gemm_median_ns / 1e3, 2),
        "median_gemm_blocks": None if kernels.gemm_median_blocks is None else round(kernels.gemm_median_blocks, 1),
        "sm_count": kernels.sm_count,
    }
    small = dataclasses.replace(launch, kind="small_batch", title=TITLES["small_batch"], evidence=evidence, fix=FIXES["small_batch"])
    return [small if f is launch else f for f in found]


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


#: causes the replay may find on its own: a fix whose replayed saving reaches MIN_SHARE of the
#: step is a finding even when the idle-gap breakdown charges its time elsewhere (a sync that
#: prevents loading the next batch while the GPU computes leaves gaps charged to data loading)
REPLAY_FOUND = ("host_device_sync", "pageable_memcpy", "allocator", "data_loading")


def found_by_replay(
    kind: str, saving: float, predicted: float, step_ms: float, model: str | None, *, per_step: pl.DataFrame, gaps: pl.DataFrame,
    syncs: pl.DataFrame, kernels: KernelStats, events: pl.DataFrame,
) -> Finding:
    """A finding the replay found (see :data:`REPLAY_FOUND`), costed by its fix's saving."""
    col = f"{kind}_ns"
    affected = per_step.filter(pl.col(col) > 0) if col in per_step.columns else per_step.clear()
    evidence = _evidence(kind, per_step, gaps, syncs, kernels, events) if col in per_step.columns else {}
    evidence["found_by"] = "replay"
    return Finding(
        kind=kind, title=TITLES[kind], ms_per_step=saving, share_of_step=saving / step_ms if step_ms else 0.0, evidence=evidence,
        fix=FIXES[kind], predicted_step_ms=predicted, steps_affected=affected.height if affected.height else per_step.height,
        modelled_fix=model,
    )


@dataclass(frozen=True)
class EvidenceInputs:
    """What an evidence builder may read: the primary device's per-step accounting and gaps, the
    sync calls, the kernel statistics and the events."""

    per_step: pl.DataFrame
    gaps: pl.DataFrame
    syncs: pl.DataFrame
    kernels: KernelStats
    events: pl.DataFrame


#: evidence of a measured cause's own, next to its common facts: input → evidence entries
EvidenceBuilder = Callable[[EvidenceInputs], dict[str, Any]]


def _evidence(
    kind: str,
    per_step: pl.DataFrame,
    gaps: pl.DataFrame,
    syncs: pl.DataFrame,
    kernels: KernelStats,
    events: pl.DataFrame,
) -> dict[str, Any]:
    """A measured cause's evidence: its common facts (total, gaps, largest gap) and the entries of
    the builder the registry names for it (``FindingKind.evidence``)."""
    col = f"{kind}_ns"
    ev: dict[str, Any] = {"total_ms": round(float(per_step[col].sum()) / 1e6, 3)}
    if col in gaps.columns:
        g = gaps.filter(pl.col(col) > 0).sort(col, descending=True)
        ev["gaps"] = g.height
        if g.height:
            ev["largest_gap"] = {
                "step": g["step"][0],
                "start_ns": g["start_ns"][0],
                "dur_ms": round(g["dur_ns"][0] / 1e6, 3),
                "attributed_ms": round(g[col][0] / 1e6, 3),
            }
    builder = EVIDENCE_BUILDERS.get(FINDING_BY_NAME[kind].evidence)
    if builder is not None:
        ev.update(builder(EvidenceInputs(per_step, gaps, syncs, kernels, events)))
    return ev


def _data_loading_evidence(x: EvidenceInputs) -> dict[str, Any]:
    names = x.events.select("name", "dur_ns").filter(pl.col("name").str.contains(r"(?i)DataLoader|_next_data|collate"))
    top = (
        names.group_by("name")
        .agg(pl.len().alias("count"), pl.col("dur_ns").sum())
        .sort(["dur_ns", "name"], descending=[True, False])
        .head(3)
    )
    ev: dict[str, Any] = {"ranges": [{"name": n, "count": c, "total_ms": round(d / 1e6, 3)} for n, c, d in top.iter_rows()]}
    if names.filter(pl.col("name").str.contains("SingleProcessDataLoaderIter")).height:
        ev["single_process_dataloader"] = True
    return ev


def _sync_evidence(x: EvidenceInputs) -> dict[str, Any]:
    syncs = x.syncs
    if not syncs.height:
        return {}
    top = (
        syncs.group_by("api", "op")
        .agg(pl.len().alias("count"), pl.col("dur_ns").sum())
        .sort(["dur_ns", "count", "api", "op"], descending=[True, True, False, False], nulls_last=True)
        .head(5)
    )
    ev: dict[str, Any] = {
        "sync_calls": [{"api": a, "op": o, "count": c, "blocked_ms": round(d / 1e6, 3)} for a, o, c, d in top.iter_rows()]
    }
    frames = (
        syncs.filter(pl.col("python_frame").is_not_null())
        .group_by("python_frame")
        .len()
        .sort(["len", "python_frame"], descending=[True, False])
        .head(3)
    )
    if frames.height:
        ev["python_frames"] = frames["python_frame"].to_list()
    steps_with = syncs.filter(pl.col("step").is_not_null())
    if steps_with.height:
        ev["syncs_per_step"] = round(steps_with.height / max(steps_with["step"].n_unique(), 1), 2)
    return ev


def _pageable_evidence(x: EvidenceInputs) -> dict[str, Any]:
    copies = x.events.select("kind", "src_memory", "dst_memory", "bytes", "memcpy_kind").filter(
        (pl.col("kind") == EventKind.MEMCPY.value)
        & ((pl.col("src_memory") == "pageable") | (pl.col("dst_memory") == "pageable"))
    )
    ev: dict[str, Any] = {"pageable_copies": copies.height, "pageable_bytes": int(copies["bytes"].sum() or 0)}
    if copies.height:
        ev["directions"] = sorted({str(k) for k in copies["memcpy_kind"].drop_nulls().to_list()})
    return ev


def _launch_evidence(x: EvidenceInputs) -> dict[str, Any]:
    k = x.kernels
    return {
        "median_kernel_us": None if k.median_kernel_ns is None else round(k.median_kernel_ns / 1e3, 2),
        "short_kernels": k.short_kernel_count,
        "kernels": k.kernel_count,
        "kernels_per_step": round(k.kernel_count / max(x.per_step.height, 1), 1),
        "launch_delay_p50_us": None if k.launch_delay_ns["p50"] is None else round(k.launch_delay_ns["p50"] / 1e3, 2),
    }


def _communication_evidence(x: EvidenceInputs) -> dict[str, Any]:
    comm = x.kernels.top.filter(pl.col("category") == "communication").head(3)
    return {"communication_kernels": comm["name"].to_list()}


def _allocator_evidence(x: EvidenceInputs) -> dict[str, Any]:
    from . import patterns

    calls = x.events.select("kind", "name", "dur_ns").filter(pl.col("kind").is_in(LAUNCH_KINDS) & pl.col("name").str.contains(patterns.ALLOCATOR_API))
    top = calls.group_by("name").agg(pl.len().alias("count"), pl.col("dur_ns").sum()).sort(["dur_ns", "name"], descending=[True, False]).head(3)
    return {"calls": [{"api": n, "count": c, "total_ms": round(d / 1e6, 3)} for n, c, d in top.iter_rows()]}


def _host_work_evidence(x: EvidenceInputs) -> dict[str, Any]:
    return {"top_host_ops": _ops_in_gaps(x.gaps.filter(pl.col("cpu_bound_ns") > 0), x.events)}


#: the evidence builders the registry names (``FindingKind.evidence``), by name
EVIDENCE_BUILDERS: Mapping[str, EvidenceBuilder] = MappingProxyType({
    "data_loading": _data_loading_evidence,
    "host_device_sync": _sync_evidence,
    "pageable_memcpy": _pageable_evidence,
    "launch_bound": _launch_evidence,
    "exposed_communication": _communication_evidence,
    "allocator": _allocator_evidence,
    "cpu_bound": _host_work_evidence,
})


def _ops_in_gaps(gaps: pl.DataFrame, events: pl.DataFrame, top: int = 5) -> list[dict[str, Any]]:
    """The host operations that overlap the given gaps most (per-thread inequality joins)."""
    if gaps.height == 0:
        return []
    from . import patterns

    # only the columns read below: the operators are a narrow copy, not every column of the events
    ops = events.select("kind", "name", "pid", "tid", "start_ns", "end_ns").filter(
        pl.col("kind").is_in([EventKind.CPU_OP.value, EventKind.ANNOTATION.value])
        & ~pl.col("name").str.contains(patterns.PROFILER_STEP)
        & ~pl.col("name").str.contains(patterns.USER_STEP)
    )
    parts = []
    op_groups = ops.partition_by(["pid", "tid"], as_dict=True)
    for (pid, tid), g in gaps.partition_by(["host_pid", "host_tid"], as_dict=True).items():
        o = op_groups.get((pid, tid))
        if o is None:
            continue
        j = g.select(pl.col("start_ns").alias("_gs"), pl.col("end_ns").alias("_ge")).join_where(
            o.select("name", "start_ns", "end_ns"), pl.col("start_ns") < pl.col("_ge"), pl.col("end_ns") > pl.col("_gs")
        )
        # summed per thread (integer sums: the same totals), so the pairs of one thread at a time are alive
        parts.append(
            j.select(
                "name", (pl.min_horizontal("end_ns", "_ge") - pl.max_horizontal("start_ns", "_gs")).alias("overlap")
            ).group_by("name").agg(pl.col("overlap").sum())
        )
        del j
    if not parts:
        return []
    agg = (
        pl.concat(parts)
        .group_by("name")
        .agg(pl.col("overlap").sum())
        .sort(["overlap", "name"], descending=[True, False])
        .head(top)
    )
    return [{"name": n, "ms_in_gaps": round(v / 1e6, 3)} for n, v in agg.iter_rows()]
