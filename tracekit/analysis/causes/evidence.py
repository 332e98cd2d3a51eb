"""What the built-in findings say as evidence, and how the findings not read from the breakdown
are detected in one trace.

An *evidence builder* (``FindingKind.evidence``) adds a measured cause's own evidence next to
its common facts (total, gaps, largest gap, built by :mod:`tracekit.analysis.findings`).  A
*finding detector* (``FindingKind.detect``) finds a kind measured otherwise (fp32 matrix
multiplies from kernel names, a small batch from memory headroom and GEMM sizes) and returns
its cost and evidence as :class:`Detected`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from ...schema import HOST_KINDS, LAUNCH_KINDS, EventKind
from .. import patterns
from ..intervals import covered_in, union
from ..kernels import KernelStats
from ..memory import MemoryHeadroom

#: device memory unused at the peak from which a larger batch is recommended
LARGE_HEADROOM = 0.4
#: a median GEMM/convolution kernel shorter than this does too little work per launch
SMALL_GEMM_NS = 20_000
#: the GPU idle this share of the steps' time or more: idle time dominates the step, and a
#: finding must say what is known about it
IDLE_DOMINATES = 0.5


@dataclass(frozen=True)
class EvidenceInputs:
    """What an evidence builder or a finding detector may read: the primary device's per-step
    accounting (complete steps) and gaps, the sync calls, the kernel statistics, the events, the
    memory headroom and the time of every step window."""

    per_step: pl.DataFrame
    gaps: pl.DataFrame
    syncs: pl.DataFrame
    kernels: KernelStats
    events: pl.DataFrame
    memory: Sequence[MemoryHeadroom] = ()
    #: the time of every step window (kernel statistics cover the whole trace)
    windows_ns: int | None = None


@dataclass(frozen=True)
class Detected:
    """A finding a detector found: its share of the step, its evidence, the steps it affects
    (None: every step).  A detector that refines another kind's finding adds ``evidence`` to
    that finding's and leaves its cost as it is (``share`` is not read)."""

    evidence: dict[str, Any] = field(default_factory=dict)
    share: float = 0.0
    steps_affected: int | None = None


# ------------------------------------------------------------------ evidence of the measured causes


def data_loading_evidence(x: EvidenceInputs) -> dict[str, Any]:
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


def sync_evidence(x: EvidenceInputs) -> dict[str, Any]:
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


def pageable_evidence(x: EvidenceInputs) -> dict[str, Any]:
    copies = x.events.select("kind", "src_memory", "dst_memory", "bytes", "memcpy_kind").filter(
        (pl.col("kind") == EventKind.MEMCPY.value)
        & ((pl.col("src_memory") == "pageable") | (pl.col("dst_memory") == "pageable"))
    )
    ev: dict[str, Any] = {"pageable_copies": copies.height, "pageable_bytes": int(copies["bytes"].sum() or 0)}
    if copies.height:
        ev["directions"] = sorted({str(k) for k in copies["memcpy_kind"].drop_nulls().to_list()})
    return ev


def launch_evidence(x: EvidenceInputs) -> dict[str, Any]:
    k = x.kernels
    return {
        "median_kernel_us": None if k.median_kernel_ns is None else round(k.median_kernel_ns / 1e3, 2),
        "short_kernels": k.short_kernel_count,
        "kernels": k.kernel_count,
        "kernels_per_step": round(k.kernel_count / max(x.per_step.height, 1), 1),
        "launch_delay_p50_us": None if k.launch_delay_ns["p50"] is None else round(k.launch_delay_ns["p50"] / 1e3, 2),
    }


def communication_evidence(x: EvidenceInputs) -> dict[str, Any]:
    comm = x.kernels.top.filter(pl.col("category") == "communication").head(3)
    return {"communication_kernels": comm["name"].to_list()}


def allocator_evidence(x: EvidenceInputs) -> dict[str, Any]:
    calls = x.events.select("kind", "name", "dur_ns").filter(pl.col("kind").is_in(LAUNCH_KINDS) & pl.col("name").str.contains(patterns.ALLOCATOR_API))
    top = calls.group_by("name").agg(pl.len().alias("count"), pl.col("dur_ns").sum()).sort(["dur_ns", "name"], descending=[True, False]).head(3)
    return {"calls": [{"api": n, "count": c, "total_ms": round(d / 1e6, 3)} for n, c, d in top.iter_rows()]}


def host_work_evidence(x: EvidenceInputs) -> dict[str, Any]:
    return {"top_host_ops": ops_in_gaps(x.gaps.filter(pl.col("cpu_bound_ns") > 0), x.events)}


def ops_in_gaps(gaps: pl.DataFrame, events: pl.DataFrame, top: int = 5) -> list[dict[str, Any]]:
    """The host operations that overlap the given gaps most (per-thread inequality joins)."""
    if gaps.height == 0:
        return []
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


# ------------------------------------------------------------------ findings measured otherwise


def fp32_matmuls(x: EvidenceInputs) -> Detected | None:
    """Matrix multiplies in fp32 on a GPU with tensor cores (from kernel names): their share of
    the steps' time."""
    k = x.kernels
    if not k.fp32_matmul_time_ns:
        return None
    span = x.windows_ns or int(x.per_step["dur_ns"].sum())
    share = min(k.fp32_matmul_time_ns / span, 1.0) if span else 0.0
    evidence = {
        "fp32_matmul_kernels": list(k.fp32_matmul_names),
        "fp32_matmul_ms_total": round(k.fp32_matmul_time_ns / 1e6, 3),
    }
    return Detected(evidence=evidence, share=share, steps_affected=x.per_step.height)


def small_batch(x: EvidenceInputs) -> Detected | None:
    """A launch-bound step whose batch is demonstrably small.

    The evidence must be the batch's own: most device memory unused at the peak
    (:data:`LARGE_HEADROOM`) *and* matrix multiplies too small to fill the GPU (median
    GEMM/convolution kernel under :data:`SMALL_GEMM_NS`, or fewer thread blocks than the GPU
    has SMs).  Without it the launch-bound finding stands alone; its fix names both remedies
    (a larger batch, CUDA graphs / compile), so nothing is reported twice with the same cost.
    """
    kernels, memory = x.kernels, x.memory
    headroom = [m.headroom for m in memory if m.headroom is not None]
    roomy = bool(headroom) and min(headroom) >= LARGE_HEADROOM
    short_gemm = kernels.gemm_median_ns is not None and kernels.gemm_median_ns < SMALL_GEMM_NS
    narrow_gemm = (
        kernels.gemm_median_blocks is not None and kernels.sm_count is not None and kernels.gemm_median_blocks < kernels.sm_count
    )
    if not (roomy and kernels.gemm_count and (short_gemm or narrow_gemm)):
        return None
    return Detected(evidence={
        "memory_headroom": round(min(headroom), 3),
        "peak_reserved_gib": [round((m.peak_reserved_bytes or 0) / 2**30, 2) for m in memory],
        "gemm_kernels": kernels.gemm_count,
        "median_gemm_us": None if kernels.gemm_median_ns is None else round(kernels.gemm_median_ns / 1e3, 2),
        "median_gemm_blocks": None if kernels.gemm_median_blocks is None else round(kernels.gemm_median_blocks, 1),
        "sm_count": kernels.sm_count,
    })


def elementwise_transfers(x: EvidenceInputs) -> Detected | None:
    """A tensor read element by element in a Python loop (``.item()``/``.cpu()`` per element,
    :func:`.detectors.transfer_loops`): the loops' host time as a share of the steps' time, the
    operator and, with Python stacks, the line the reads come from (``location``: None without
    stacks)."""
    from .detectors import transfer_loops

    loops = transfer_loops(x.events, x.events.clear())
    if loops.height == 0:
        return None
    span = x.windows_ns or int(x.per_step["dur_ns"].sum())
    ns = int((loops["end_ns"] - loops["start_ns"]).sum())
    reads = int(loops["reads"].sum())
    ops = loops.group_by("op").agg(pl.col("reads").sum()).sort(["reads", "op"], descending=[True, False], nulls_last=True)
    # the Python line of the syncs inside the loops (recorded with with_stack=True)
    frames = x.syncs.filter(pl.col("python_frame").is_not_null()).select("pid", "tid", "start_ns", "python_frame").sort("start_ns")
    inside = frames.join_asof(
        loops.select("pid", "tid", pl.col("start_ns").alias("_ls"), pl.col("end_ns").alias("_le")).sort("_ls"),
        left_on="start_ns", right_on="_ls", by=["pid", "tid"], strategy="backward", check_sortedness=False,
    ).filter(pl.col("_le").is_not_null() & (pl.col("start_ns") < pl.col("_le")))
    top = inside.group_by("python_frame").len().sort(["len", "python_frame"], descending=[True, False])
    location = top["python_frame"][0] if top.height else None
    evidence = {
        "loops": loops.height,
        "element_reads": reads,
        "reads_per_loop": round(reads / loops.height, 1),
        "op": ops["op"][0],
        "bytes_per_read": int(loops["bytes"].median() or 0),  # type: ignore[arg-type]
        "loop_ms_total": round(ns / 1e6, 3),
        "location": location,
    }
    return Detected(evidence=evidence, share=min(ns / span, 1.0) if span else 0.0)


def untraced_idle(x: EvidenceInputs) -> Detected | None:
    """A step mostly idle, with idle time nothing recorded explains (the ``unattributed`` part of
    the breakdown): what the trace does know about it.

    Found when the GPU is idle at least :data:`IDLE_DOMINATES` of the steps' time (a CPU-only
    trace has no GPU idle time: never); its cost is the unattributed idle time (reported from the
    findings' threshold on).  The evidence: the idle share; how much of the step any recorded
    host event covers (on any thread of the rank: the rest is host time the profiler did not
    record) and where the last one ends; the torch.compile regions the trace calls and the
    compilation it recorded (a compiled region's first call compiles it: one-time warm-up); and
    whether the trace has Python stacks, which would show the functions behind the gap.
    """
    per = x.per_step
    if not per.height or "busy_ns" not in per.columns or per["busy_ns"].null_count():
        return None
    total = float(per["dur_ns"].sum())
    idle = 1.0 - float(per["busy_ns"].sum()) / total if total else 0.0
    untraced = float(per["unattributed_ns"].sum()) / total if total else 0.0
    if idle < IDLE_DOMINATES or untraced <= 0.0:
        return None
    windows = per.select("rank", "step", "start_ns", "end_ns")
    host = x.events.select("kind", "name", "rank", "start_ns", "end_ns").filter(
        pl.col("kind").is_in(HOST_KINDS)
        & ~pl.col("name").str.contains(patterns.PROFILER_STEP)
        & ~pl.col("name").str.contains(patterns.USER_STEP)
    )
    recorded = covered_in(windows, union(host, ["rank"]), ["rank"])
    last_end = (
        windows.join_where(
            host.select(pl.col("rank").alias("_r"), pl.col("start_ns").alias("_s"), pl.col("end_ns").alias("_e")),
            pl.col("rank") == pl.col("_r"), pl.col("_s") < pl.col("end_ns"), pl.col("_e") > pl.col("start_ns"),
        )
        .group_by("rank", "step")
        .agg((pl.min_horizontal(pl.col("_e"), pl.col("end_ns")) - pl.col("start_ns")).max().alias("_last"))
    )
    ev: dict[str, Any] = {
        "idle_share": round(idle, 4),
        "untraced_share": round(untraced, 4),
        "host_recorded_share": round(float(recorded.sum()) / total, 4),
        "last_host_event_ms": round(float(last_end.select(pl.col("_last").max()).item()) / 1e6, 3) if last_end.height else None,
        "python_stacks": bool(x.events.filter(pl.col("kind") == EventKind.PYTHON.value).height),
    }
    named = x.events.select("name", "dur_ns")
    for key, pattern in (("compiled_regions", patterns.COMPILED_REGION), ("compile_events", patterns.COMPILE_WORK)):
        hits = (
            named.filter(pl.col("name").str.contains(pattern))
            .group_by("name")
            .agg(pl.len().alias("count"), pl.col("dur_ns").sum())
            .sort(["dur_ns", "name"], descending=[True, False])
            .head(3)
        )
        ev[key] = [{"name": n, "count": c, "total_ms": round(d / 1e6, 3)} for n, c, d in hits.iter_rows()]
    return Detected(evidence=ev, share=untraced, steps_affected=per.filter(pl.col("unattributed_ns") > 0).height)
