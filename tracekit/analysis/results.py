"""What the analysis of one trace concludes, as a frozen result: :class:`Diagnosis`
(a job's is :class:`tracekit.analysis.job_results.JobDiagnosis`).

:mod:`.diagnose` fills them in; renderers, the TUI, the notebook API and the batch only read
them.  They sit apart from the orchestrator so that the analyses of a job (:mod:`.multirank`,
:mod:`.job_replay`) can name a diagnosis without importing the pipeline that makes one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from ..schema import TraceInfo
from .critical_path import CriticalPath
from .efficiency import Efficiency
from .findings import Finding
from .kernels import KernelStats
from .memory import MemoryHeadroom
from .plan import Plan, no_plan
from .steady import WarmUp, no_warmup
from .timeline import Timeline
from .whatif import WhatIfResult


@dataclass(frozen=True)
class Diagnosis:
    """Everything tracekit concluded about one trace."""

    info: TraceInfo
    #: rank, step, start_ns, end_ns, dur_ns, cpu_end_ns, complete, source, warmup, device, gpu_busy_ns,
    #: utilization; ``complete`` steps are the steady-state population (whole iterations, not warm-up)
    steps: pl.DataFrame
    step_sources: dict[int, str]
    timeline: Timeline
    syncs: pl.DataFrame
    kernels: KernelStats
    memory: tuple[MemoryHeadroom, ...]
    findings: tuple[Finding, ...]
    #: cause → share of step time (complete steps, each rank's primary device)
    breakdown: dict[str, float]
    #: cause → ms in the median step (share × ``step_ms_median``: adds up to it, see analysis/steady.py)
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
    #: FLOPs, roofline and MFU (``efficiency.available`` is False without record_shapes)
    efficiency: Efficiency = field(default_factory=lambda: Efficiency(available=False, reason=None))
    #: one-time costs found in the profiled window and left out of the steady state
    warmup: WarmUp = field(default_factory=no_warmup)
    #: the fixes to make, in order, each priced with the earlier ones applied (:mod:`.plan`)
    plan: Plan = field(default_factory=lambda: no_plan(None, None))

    @property
    def complete_steps(self) -> int:
        return int(self.steps.filter(pl.col("complete")).height)


__all__ = ["Diagnosis"]
