"""Analyses: pure functions from canonical tables to polars tables and frozen results.

:func:`diagnose` runs them all on one trace and returns a :class:`Diagnosis` — steps,
utilization, idle gaps with causes, sync points, kernel statistics, memory headroom and
ranked findings.  Nothing here prints, plots or keeps global state; renderers
(:mod:`tracekit.report`) and the TUI only present a Diagnosis.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from ..schema import EventKind, TraceInfo, TraceTables
from .critical_path import CriticalPath, critical_path
from .findings import (
    HEALTHY_UTILIZATION,
    MIN_SHARE,
    REPLAY_FOUND,
    Finding,
    build_findings,
    found_by_replay,
    price_by_replay,
    rank_by_saving,
)
from .host import host_breakdown
from .kernels import KernelStats, kernel_stats
from .memory import MemoryHeadroom, memory_headroom
from .steps import Steps, find_steps
from .syncs import find_syncs
from .timeline import CAUSES, Timeline, analyse_timeline, gpu_activity
from .whatif import WhatIf, WhatIfResult, finding_what_if


@dataclass(frozen=True)
class Diagnosis:
    """Everything tracekit concluded about one trace."""

    info: TraceInfo
    #: rank, step, start_ns, end_ns, dur_ns, cpu_end_ns, complete, source, device, gpu_busy_ns, utilization
    steps: pl.DataFrame
    step_sources: dict[int, str]
    timeline: Timeline
    syncs: pl.DataFrame
    kernels: KernelStats
    memory: tuple[MemoryHeadroom, ...]
    findings: tuple[Finding, ...]
    #: cause → share of step time (complete steps, each rank's primary device)
    breakdown: dict[str, float]
    #: cause → ms per step
    breakdown_ms: dict[str, float]
    step_ms_median: float | None
    step_ms_mean: float | None
    gpu_utilization: float | None
    data_quality: tuple[str, ...] = field(default_factory=tuple)
    #: the trace's devices table (names, memory), for display
    devices: pl.DataFrame = field(default_factory=pl.DataFrame)
    #: the critical path of every step and its breakdown (None when the trace has no steps)
    critical_path: CriticalPath | None = None
    #: the what-if questions the caller asked (``diagnose(..., what_if=...)``), answered
    what_ifs: tuple[WhatIfResult, ...] = ()

    @property
    def complete_steps(self) -> int:
        return int(self.steps.filter(pl.col("complete")).height)


def diagnose(tables: TraceTables, *, what_if: Sequence[Mapping[str, float]] = ()) -> Diagnosis:
    """Run every analysis on one trace.

    ``what_if`` lists extra questions for the critical path (each a mapping cause → factor,
    see :mod:`tracekit.analysis.whatif`); every finding gets its own what-if regardless.

    Example (from the repository root): a loop whose single-process DataLoader stalls the GPU,
    and whose ``loss.item()`` keeps the host from loading the next batch while the GPU computes
    (the replay prices each fix: either saves the 40 ms)::

        >>> import tracekit
        >>> from tracekit.analysis import diagnose
        >>> d = diagnose(tracekit.read_trace("sample_traces/synthetic/dataloader_stall.kineto.json"))
        >>> round(d.step_ms_median, 2), round(d.gpu_utilization, 2), d.complete_steps
        (100.01, 0.6, 8)
        >>> [(f.kind, round(f.ms_per_step, 1)) for f in d.findings]
        [('data_loading', 40.0), ('host_device_sync', 40.0)]
        >>> round(d.breakdown_ms["data_loading"], 1)
        40.0
    """
    events, links = tables.events, tables.links
    steps: Steps = find_steps(events, links)
    timeline = analyse_timeline(events, links, steps.frame)
    syncs = find_syncs(events, links, steps.frame)
    kstats = kernel_stats(events, links, tables.devices)
    headroom = tuple(memory_headroom(tables.memory, tables.devices))

    primary = pl.DataFrame(
        {"rank": list(timeline.primary_device), "device": list(timeline.primary_device.values())},
        schema={"rank": pl.Int32, "device": pl.Int32},
    )
    main_steps = timeline.per_step.join(primary, on=["rank", "device"], how="inner")
    step_table = steps.frame.join(
        main_steps.select("rank", "step", "device", pl.col("busy_ns").alias("gpu_busy_ns")), on=["rank", "step"], how="left"
    ).with_columns((pl.col("gpu_busy_ns") / pl.col("dur_ns")).alias("utilization"))
    complete = step_table.filter(pl.col("complete"))
    complete_main = main_steps.join(complete.select("rank", "step"), on=["rank", "step"], how="semi")
    finding_gaps = timeline.gaps
    host_only = gpu_activity(events).height == 0
    if host_only and complete.height:
        # CPU-only trace: the training thread stands in for the device (analysis/host.py)
        host_steps, finding_gaps = host_breakdown(events, steps.frame)
        complete_main = host_steps.join(complete.select("rank", "step"), on=["rank", "step"], how="semi")

    step_ms_median = _ms(complete["dur_ns"].median()) if complete.height else None
    step_ms_mean = _ms(complete["dur_ns"].mean()) if complete.height else None
    utilization = None
    breakdown: dict[str, float] = {}
    breakdown_ms: dict[str, float] = {}
    if complete_main.height:
        total = float(complete_main["dur_ns"].sum())
        utilization = float(complete_main["busy_ns"].sum()) / total if total and not host_only else None
        n = complete_main.height
        for cause in CAUSES:
            value = float(complete_main[f"{cause}_ns"].sum())
            breakdown[cause] = float(value / total) if total else 0.0
            breakdown_ms[cause] = float(value / 1e6 / n)
    findings = build_findings(
        per_step=complete_main, gaps=finding_gaps, syncs=syncs, kernels=kstats, memory=list(headroom), events=events,
        utilization=utilization,
    )
    # the critical path predicts each finding's step time once fixed; findings are then
    # ranked by what fixing them would save, not by the time they take
    asked = tuple(WhatIf.of(w) for w in what_if)
    per_finding = {f.kind: wi for f in findings if (wi := finding_what_if(f.kind)) is not None}
    cpath = None
    if steps.frame.height:
        scenarios = list(dict.fromkeys([*per_finding.values(), *asked]))
        cpath = critical_path(events, links, steps.frame, what_ifs=scenarios)
        answers = {r.what_if: r for r in cpath.what_ifs}
        findings = rank_by_saving(findings, {kind: answers[wi] for kind, wi in per_finding.items()})
    # ---- issue 16: the replay of the steady state prices each finding's fix and the asked
    # what-ifs (the critical path above stays as the explanation, and as the fallback)
    replay_notes: tuple[str, ...] = ()
    if cpath is not None and step_ms_median is not None and not host_only:
        from .replay import FIX_MODELS, price

        healthy = utilization is not None and utilization >= HEALTHY_UTILIZATION
        candidates = [f.kind for f in findings] + ([] if healthy else list(REPLAY_FOUND))
        pricing = price(candidates, events, links, steps.frame, step_ms_median, asked)
        replay_notes = pricing.notes
        if pricing.trusted:
            raised = {f.kind for f in findings}
            extra = [
                found_by_replay(
                    kind, saving, predicted, step_ms_median, FIX_MODELS.get(kind), per_step=complete_main, gaps=finding_gaps, syncs=syncs,
                    kernels=kstats, events=events,
                )
                for kind, (saving, predicted) in pricing.fixes.items()
                if kind not in raised and saving >= MIN_SHARE * step_ms_median
            ]
            findings = price_by_replay([*findings, *extra], pricing.fixes, step_ms_median, FIX_MODELS, pricing.mean_shares)
            answers = {r.what_if: r for r in cpath.what_ifs}
            for wi in asked:
                if wi.label in pricing.what_ifs and wi in answers:
                    answers[wi] = dataclasses.replace(answers[wi], baseline_step_ms=step_ms_median, predicted_step_ms=pricing.what_ifs[wi.label])
            cpath = dataclasses.replace(cpath, what_ifs=tuple(answers[r.what_if] for r in cpath.what_ifs))
    # ---- end issue 16
    return Diagnosis(
        info=tables.info,
        steps=step_table,
        step_sources=steps.sources,
        timeline=timeline,
        syncs=syncs,
        kernels=kstats,
        memory=headroom,
        findings=tuple(findings),
        breakdown=breakdown,
        breakdown_ms=breakdown_ms,
        step_ms_median=step_ms_median,
        step_ms_mean=step_ms_mean,
        gpu_utilization=utilization,
        data_quality=tuple(_data_quality(tables, steps, syncs)) + (cpath.notes if cpath is not None else ()) + replay_notes,
        devices=tables.devices,
        critical_path=cpath,
        what_ifs=tuple(a for a in (cpath.what_ifs if cpath is not None else ()) if a.what_if in asked),
    )


def _ms(value: Any) -> float | None:
    return None if value is None else float(value) / 1e6


def _data_quality(tables: TraceTables, steps: Steps, syncs: pl.DataFrame) -> list[str]:
    ev = tables.events
    kinds = set(tables.kind_counts())
    notes: list[str] = []
    gpu = {EventKind.KERNEL.value, EventKind.MEMCPY.value, EventKind.MEMSET.value} & kinds
    cpu = {EventKind.CPU_OP.value, EventKind.ANNOTATION.value, EventKind.RUNTIME.value, EventKind.PYTHON.value} & kinds
    if not gpu:
        notes.append(
            "CPU-only trace: no GPU activity was recorded, so GPU utilization and idle gaps cannot be measured; "
            "the breakdown splits the training thread's step time into data loading and the rest (compute)."
        )
    if gpu and not cpu:
        notes.append("GPU-only trace: no host events were recorded, so idle gaps cannot be attributed to host activity (they stay unattributed).")
    if gpu and tables.links.height == 0 and EventKind.RUNTIME.value in kinds:
        notes.append("GPU work is not linked to its launch calls (no correlation ids); gap causes rely on the main thread's activity.")
    if gpu and EventKind.SYNC.value not in kinds:
        notes.append(
            "No explicit synchronisation events (cuda_sync): sync points are inferred from API and operator names. "
            "Capture with torch.profiler experimental_config=_ExperimentalConfig(enable_cuda_sync_events=True) or nsys --trace=cuda."
        )
    if gpu and EventKind.PYTHON.value not in kinds and syncs.height:
        notes.append("No Python stacks (with_stack=False): sync points name the operator, not the line of Python that caused them.")
    sources = set(steps.sources.values())
    if sources and sources != {"profiler_step"}:
        notes.append("Steps were found from " + ", ".join(sorted(sources)) + " (no ProfilerStep markers).")
    partial = steps.frame.filter(~pl.col("complete")).height
    if partial:
        notes.append(f"{partial} partial step window(s) (before the first or after the last boundary) are shown but not counted in medians.")
    if tables.info.truncated:
        notes.append("The trace was truncated; the last step may be incomplete.")
    del ev
    return notes


__all__ = ["CAUSES", "CriticalPath", "Diagnosis", "Finding", "WhatIfResult", "diagnose"]
