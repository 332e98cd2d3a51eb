"""What-if questions on the critical-path graph: how long would a step take without a cause?

Every edge of a step's dependency graph (:mod:`tracekit.analysis.critical_path`) carries one
*tag* saying what its time is made of.  A what-if scales the weights of the edges whose tag
belongs to a cause and recomputes the longest path; the predicted step time is the step's
wall time minus what the path lost.  Because the path is recomputed, overlap is honoured:
removing 40 ms of data loading that ran while the GPU was busy saves nothing, and removing
it from a step whose GPU work is 60 ms predicts max(CPU path, GPU path), never a plain
subtraction.

Causes (the names ``tracekit analyze --what-if CAUSE=FACTOR`` accepts) map onto tags:

======================  ========================================================================
``data_loading``        host time inside DataLoader / collate / data-pipeline ranges
``host_device_sync``    blocking sync calls, data-dependent operators (``.item()``) and the
                        GPU → host wait edges; factor 0 also removes the waits themselves
``pageable_memcpy``     copies from/to pageable memory: the DMA, the launch, the host call that
                        blocks on it (factor 0 makes the copy asynchronous)
``launch_bound``        CUDA runtime/driver calls, the operator dispatch around launches, launch
                        latency and inter-kernel gaps on a stream
``allocator``           cudaMalloc/cudaFree-style calls
``exposed_communication``  communication kernels and host-side collective calls
``communication``       communication kernels only
``cpu_bound``           other host work, including untraced time of the thread driving the step
``kernels``             every compute kernel (not communication, not copies)
``fp32_matmul``         fp32 (SIMT) GEMM/convolution kernels
``memcpy``              every copy and memset (pinned or pageable)
======================  ========================================================================

A factor multiplies the cause's time: ``0`` removes it, ``0.5`` halves it, ``2`` doubles it.
Waits (GPU → host sync edges) are dependencies, not durations: factor 0 removes the
dependency, any other factor scales the wake-up latency.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import polars as pl

from ..errors import UsageError

#: what every edge's time is made of (one tag per edge)
TAGS = (
    "kernel",
    "fp32_matmul",
    "comm_kernel",
    "memcpy",
    "pageable_memcpy",
    "launch",
    "data_loading",
    "sync",
    "allocator",
    "collective",
    "cpu",
    "wait",
)

#: the critical-path breakdown's causes, in display order
CP_CAUSES = (
    "gpu_compute",
    "communication",
    "memcpy",
    "launch_overhead",
    "data_loading",
    "host_device_sync",
    "allocator",
    "cpu_other",
)

#: tag → breakdown cause
TAG_CAUSE = {
    "kernel": "gpu_compute",
    "fp32_matmul": "gpu_compute",
    "comm_kernel": "communication",
    "collective": "communication",
    "memcpy": "memcpy",
    "pageable_memcpy": "memcpy",
    "launch": "launch_overhead",
    "data_loading": "data_loading",
    "sync": "host_device_sync",
    "allocator": "allocator",
    "cpu": "cpu_other",
    "wait": "cpu_other",
}

#: what-if cause name → the tags it scales
WHAT_IF_CAUSES: dict[str, frozenset[str]] = {
    "data_loading": frozenset({"data_loading"}),
    "host_device_sync": frozenset({"sync"}),
    "pageable_memcpy": frozenset({"pageable_memcpy"}),
    "launch_bound": frozenset({"launch"}),
    "allocator": frozenset({"allocator"}),
    "exposed_communication": frozenset({"comm_kernel", "collective"}),
    "communication": frozenset({"comm_kernel"}),
    "cpu_bound": frozenset({"cpu"}),
    "kernels": frozenset({"kernel", "fp32_matmul"}),
    "fp32_matmul": frozenset({"fp32_matmul"}),
    "memcpy": frozenset({"memcpy", "pageable_memcpy"}),
}

#: assumed speed-up of fp32 GEMMs once they run on tensor cores (TF32/bf16); conservative:
#: the hardware peak ratio is 8x or more, real models see 2-3x end to end on matmuls
TENSOR_CORE_SPEEDUP = 2.0

#: finding kind → the what-if that models fixing it
FINDING_WHAT_IF: dict[str, dict[str, float]] = {
    "data_loading": {"data_loading": 0.0},
    "host_device_sync": {"host_device_sync": 0.0},
    "pageable_memcpy": {"pageable_memcpy": 0.0},
    "launch_bound": {"launch_bound": 0.0},
    # a larger batch amortises the per-launch cost: the step loses its launch overhead
    "small_batch": {"launch_bound": 0.0},
    "allocator": {"allocator": 0.0},
    "exposed_communication": {"exposed_communication": 0.0},
    "cpu_bound": {"cpu_bound": 0.0},
    "no_tensor_cores": {"fp32_matmul": 1.0 / TENSOR_CORE_SPEEDUP},
}

#: weight given to a removed dependency: far below any real path, so it is never taken
REMOVED = -(10**15)


@dataclass(frozen=True)
class WhatIf:
    """One question: scale these causes by these factors (all together)."""

    factors: tuple[tuple[str, float], ...]

    @classmethod
    def of(cls, factors: Mapping[str, float]) -> WhatIf:
        checked = {}
        for name, factor in factors.items():
            checked[_valid_cause(name)] = _valid_factor(name, factor)
        return cls(tuple(sorted(checked.items())))

    @property
    def label(self) -> str:
        return ", ".join(f"{name}={_fmt(factor)}" for name, factor in self.factors)

    def tag_factors(self) -> dict[str, float]:
        """tag → factor (1 for untouched tags)."""
        out = dict.fromkeys(TAGS, 1.0)
        for name, factor in self.factors:
            for tag in WHAT_IF_CAUSES[name]:
                out[tag] = factor
        return out


@dataclass(frozen=True)
class WhatIfResult:
    """The answer to one :class:`WhatIf`, per step and as a mean over complete steps."""

    what_if: WhatIf
    #: rank, step, complete, wall_ns, path_ns, predicted_path_ns, predicted_step_ns
    per_step: pl.DataFrame
    #: mean wall time of the complete steps, ms
    baseline_step_ms: float | None
    #: mean predicted time of the complete steps, ms
    predicted_step_ms: float | None

    @property
    def saving_ms(self) -> float | None:
        if self.baseline_step_ms is None or self.predicted_step_ms is None:
            return None
        return self.baseline_step_ms - self.predicted_step_ms

    def to_dict(self) -> dict[str, object]:
        return {
            "what_if": dict(self.what_if.factors),
            "label": self.what_if.label,
            "baseline_step_ms": _round(self.baseline_step_ms),
            "predicted_step_ms": _round(self.predicted_step_ms),
            "saving_ms": _round(self.saving_ms),
        }


def parse_what_if(spec: str) -> tuple[str, float]:
    """``"data_loading=0"`` → ``("data_loading", 0.0)``; a bad spec is a :class:`UsageError`."""
    if "=" not in spec:
        raise UsageError(
            f"--what-if expects CAUSE=FACTOR (e.g. data_loading=0), got {spec!r}",
            hint="valid causes: " + ", ".join(WHAT_IF_CAUSES),
        )
    name, _, value = spec.partition("=")
    name = _valid_cause(name.strip())
    try:
        factor = float(value.strip())
    except ValueError:
        raise UsageError(f"--what-if {spec!r}: the factor must be a number (0 removes the cause, 0.5 halves it)") from None
    return name, _valid_factor(name, factor)


def scenario_weights(what_if: WhatIf) -> pl.Expr:
    """The weight of every edge under ``what_if`` (an expression over a graph's edges, which
    hold their time split by tag in ``w_<tag>`` columns and a ``removable`` flag)."""
    factors = what_if.tag_factors()
    scaled: pl.Expr = pl.lit(0.0)
    for tag in TAGS:
        scaled = scaled + pl.col(f"w_{tag}").cast(pl.Float64) * factors[tag]
    gone = pl.col("removable") & (pl.col("tag").replace_strict(factors, default=1.0, return_dtype=pl.Float64) == 0.0)
    return pl.when(gone).then(pl.lit(REMOVED, dtype=pl.Int64)).otherwise(scaled.round(0).cast(pl.Int64))


def finding_what_if(kind: str) -> WhatIf | None:
    spec = FINDING_WHAT_IF.get(kind)
    return None if spec is None else WhatIf.of(spec)


def _valid_cause(name: str) -> str:
    if name not in WHAT_IF_CAUSES:
        raise UsageError(
            f"unknown what-if cause {name!r}",
            hint="valid causes: " + ", ".join(WHAT_IF_CAUSES) + " (e.g. --what-if data_loading=0 --what-if kernels=0.5)",
        )
    return name


def _valid_factor(name: str, factor: float) -> float:
    value = float(factor)
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"--what-if {name}={factor}: the factor must be a finite number >= 0")
    return value


def _fmt(x: float) -> str:
    return f"{x:g}"


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 4)


def what_ifs(specs: Iterable[Mapping[str, float]]) -> tuple[WhatIf, ...]:
    return tuple(WhatIf.of(s) for s in specs)
