"""Busy is not efficient: achieved FLOP/s and bytes/s of every operator, the roofline, MFU.

From a ``record_shapes=True`` trace:

1. **Operators** with a performance model (:mod:`tracekit.analysis.flops`) are taken at the
   outermost level of each host thread (``aten::linear`` rather than the ``aten::addmm``
   inside it, so no work is counted twice); an Nsight ``emit_nvtx`` range counts as the
   operator it names.
2. Each operator's **GPU time** is the time of the kernels launched while it ran on its
   thread (launch → kernel links, so backward operators on the autograd thread count too).
3. With the device's **peaks** (:mod:`tracekit.analysis.peaks`): achieved TFLOP/s and GB/s,
   arithmetic intensity (FLOPs per byte), the place on the roofline (compute-bound above the
   ridge point, memory-bound below) and the share of the attainable peak
   ``min(peak FLOP/s, intensity × bandwidth)`` the operator reached.  Operators without
   model FLOPs (normalisations, elementwise) are judged on bandwidth alone.
4. **MFU** of a step: its model FLOPs (GEMM, convolution, attention) ÷ (step time × the peak
   of the dtype that carries most of the trace's FLOPs).
5. The step split: ``idle`` (not busy; its causes are the existing breakdown),
   ``busy_efficient`` (the time the modelled operators would take at the roofline),
   ``busy_inefficient`` (the rest of their kernel time) and ``busy_unmodelled`` (busy time
   of kernels no modelled operator launched).

Everything is a polars pipeline over the trace; Python runs once per distinct operator
signature (shape and dtype), never per event.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from ..schema import Column, EventKind, TableSchema
from .causes import FIXES, TITLES
from .findings import Finding
from .flops import MODELLED_OPS, op_costs
from .peaks import DevicePeaks, device_peaks

#: model-FLOP classes (the others are judged on bandwidth)
FLOP_CLASSES = ("gemm", "conv", "attention")
#: a GEMM reaching less than this share of its attainable peak is slow
SLOW_SHARE = 0.3
#: output tile edge assumed for wave quantisation (cuBLAS/hipBLASLt tiles are 64-256 wide)
TILE = 128
#: kernel names of fp32 GEMMs that run on TF32 tensor cores (cuBLAS/CUTLASS: ``tf32``, ``xf32``,
#: ``tensorop_s1688gemm`` / ``s16816gemm`` on Ampere and later)
TF32_KERNEL = r"(?i)tf32|xf32|s1688gemm|s16816gemm|tensorop_s\d"
#: operator names shown for a chain of elementwise operators
CHAIN_NAMES = 6
#: reason shown when the trace has no shapes
NO_SHAPES = "capture with record_shapes=True"

OPS_SCHEMA: dict[str, Any] = {
    "event_id": pl.Int64, "rank": pl.Int32, "step": pl.Int64, "device": pl.Int32, "name": pl.String,
    "op_class": pl.String, "shape": pl.String, "dtype": pl.String, "flops": pl.Int64, "bytes": pl.Int64,
    "gpu_ns": pl.Int64, "kernels": pl.UInt32, "start_ns": pl.Int64, "first_kernel_ns": pl.Int64, "m": pl.Int64,
    "n": pl.Int64, "k": pl.Int64, "tflops": pl.Float64, "gbps": pl.Float64, "intensity": pl.Float64,
    "bound": pl.String, "pct_of_attainable": pl.Float64, "ideal_ns": pl.Float64, "pid": pl.Int64, "tid": pl.Int64,
}  # fmt: skip


#: the per-operator efficiency table ``tracekit export`` writes (efficiency.parquet)
OP_EFFICIENCY = TableSchema(
    "efficiency",
    "One row per operator shape: the outermost modelled operators of a `record_shapes=True` trace with the same "
    "name, class, shapes and dtype, their GPU time and where they sit on the device's roofline "
    "(docs/efficiency.md). Written only when the trace records shapes.",
    (
        Column("name", pl.String(), "Operator (`aten::linear`...)."),
        Column("op_class", pl.String(), "gemm, conv, attention, norm or elementwise."),
        Column(
            "shape",
            pl.String(),
            "Problem size: `M= N= K=` for GEMMs, tensors for convolutions, `B H Sq Sk D` for attention, the largest tensor otherwise.",
        ),
        Column(
            "dtype", pl.String(), "Dtype the math runs in (fp32, tf32 when the kernels say so, bf16, fp16, fp8...)."
        ),
        Column("calls", pl.UInt32(), "Operator calls with this signature."),
        Column("gpu_ns", pl.Int64(), "Time of the kernels they launched, ns."),
        Column("flops", pl.Int64(), "Model FLOPs (a multiply-add is 2; 0 for normalisation/elementwise)."),
        Column(
            "bytes",
            pl.Int64(),
            "Minimum bytes moved: inputs read once, output written once (null when a dtype is not recorded).",
        ),
        Column(
            "ideal_ns",
            pl.Float64(),
            "Time at the roofline: the same work at the attainable peak, ns (null for an unknown GPU).",
        ),
        Column("bound", pl.String(), "`compute` or `memory`: the side of the ridge point the operator sits on."),
        Column("tflops", pl.Float64(), "Achieved TFLOP/s."),
        Column("gbps", pl.Float64(), "Achieved GB/s (10^9 bytes/s)."),
        Column("intensity", pl.Float64(), "Arithmetic intensity, FLOPs per byte."),
        Column("pct_of_attainable", pl.Float64(), "Share of the attainable peak reached (ideal_ns / gpu_ns), 0..1."),
        Column("share_of_gpu_time", pl.Float64(), "Share of the modelled operators' GPU time."),
    ),
)


@dataclass(frozen=True)
class Efficiency:
    """How well the busy time was used (see the module docstring)."""

    #: True when at least one operator has a cost and GPU time
    available: bool
    #: why MFU is missing (no shapes, unknown device...), None when it is there
    reason: str | None
    #: the device the peaks are for (name as the trace gives it) and its peaks (None: unknown)
    device_name: str | None = None
    peaks: DevicePeaks | None = None
    #: per operator call: see :data:`OPS_SCHEMA`
    ops: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=OPS_SCHEMA))
    #: per (name, op_class, shape, dtype): calls, gpu_ns, flops, bytes, tflops, gbps, intensity,
    #: bound, pct_of_attainable, share_of_gpu_time
    by_op: pl.DataFrame = field(default_factory=pl.DataFrame)
    #: per op_class: the same measures
    by_class: pl.DataFrame = field(default_factory=pl.DataFrame)
    #: per (rank, step): dur_ns, complete, ops, model_flops, bytes (of the modelled operators),
    #: tflops, gbps (over the step's wall time), mfu, kernel_ns, busy_ns, idle_ns,
    #: busy_efficient_ns, busy_inefficient_ns, busy_unmodelled_ns
    per_step: pl.DataFrame = field(default_factory=pl.DataFrame)
    #: model FLOPs ÷ (time × peak) over the complete steps (all steps when none is complete)
    mfu: float | None = None
    #: the dtype whose peak MFU is measured against, and that peak
    mfu_dtype: str | None = None
    peak_tflops: float | None = None
    #: achieved model TFLOP/s over the same steps
    achieved_tflops: float | None = None
    #: step split as shares of step time: idle, busy_efficient, busy_inefficient, busy_unmodelled
    split: dict[str, float] = field(default_factory=dict)
    #: operator calls whose shapes did not fit their operator (not costed), and why (a sample)
    uncosted: int = 0
    uncosted_reasons: tuple[str, ...] = ()

    @property
    def headline(self) -> str:
        """One line for report headlines: ``MFU 41.2% of bf16 peak`` or why it is missing."""
        if self.mfu is not None and self.mfu_dtype is not None:
            return f"MFU {mfu_pct(self.mfu)} of the {self.mfu_dtype} peak ({self.peak_tflops:g} TFLOP/s, {self.peaks.model if self.peaks else '?'})"
        return f"MFU n/a: {self.reason}" if self.reason else "MFU n/a"


def nonzero_digits(value: float) -> str:
    """``value`` with one decimal (and thousands separators), or, when that would read as zero,
    with the decimals of two significant digits (``0.012``): a measured but tiny MFU or FLOP rate
    is not mistaken for an unknown one."""
    if value >= 0.1 or value <= 0:
        return f"{value:,.1f}"
    return f"{value:.{1 - math.floor(math.log10(value))}f}"


def mfu_pct(mfu: float) -> str:
    """An MFU as a percentage that never reads as zero (:func:`nonzero_digits`)."""
    return nonzero_digits(100 * mfu) + "%"


def outermost_ops(events: pl.DataFrame) -> pl.DataFrame:
    """Operator rows with shapes and a performance model, outermost on their thread.

    Adds ``_base``: the operator name (an ``emit_nvtx`` range name cut before its first comma).
    """
    kinds = [EventKind.CPU_OP.value, EventKind.ANNOTATION.value]
    cand = (
        events.filter(pl.col("kind").is_in(kinds) & pl.col("input_dims").is_not_null())
        .with_columns(pl.col("name").str.split(", ").list.first().str.strip_chars().alias("_base"))
        .filter(pl.col("_base").is_in(MODELLED_OPS))
        .sort(["pid", "tid", "start_ns", "dur_ns"], descending=[False, False, False, True])
    )
    prev_end = pl.col("end_ns").cum_max().shift(1).over(["pid", "tid"])
    return cand.filter(prev_end.is_null() | (pl.col("start_ns") >= prev_end))


def unavailable(reason: str) -> Efficiency:
    return Efficiency(available=False, reason=reason)


def efficiency(events: pl.DataFrame, links: pl.DataFrame, devices: pl.DataFrame, steps: pl.DataFrame) -> Efficiency:
    """Efficiency of every modelled operator and step.

    ``steps`` is the diagnosis' step table (rank, step, start_ns, end_ns, dur_ns, complete,
    and optionally device and gpu_busy_ns for the busy split).
    """
    if events.filter(pl.col("input_dims").is_not_null()).height == 0:
        return unavailable(f"no operator shapes in the trace ({NO_SHAPES})")
    outer = outermost_ops(events)
    if outer.height == 0:
        return unavailable("the trace records shapes but no GEMM, convolution, attention or elementwise operator")

    # kernels launched while each outer operator ran on its thread
    kernels = events.filter(pl.col("kind") == EventKind.KERNEL.value).select(
        pl.col("event_id").alias("gpu_event_id"),
        pl.col("rank").alias("k_rank"),
        pl.col("start_ns").alias("k_start"),
        pl.col("dur_ns").alias("k_dur"),
        pl.col("device").alias("k_device"),
        pl.col("name").alias("k_name"),
    )
    launches = events.filter(pl.col("kind").is_in([EventKind.RUNTIME.value, EventKind.DRIVER.value])).select(
        pl.col("event_id").alias("launch_event_id"), "pid", "tid", pl.col("start_ns").alias("l_start")
    )
    launched = (
        links.select("launch_event_id", "gpu_event_id")
        .join(kernels, on="gpu_event_id", how="inner")
        .join(launches, on="launch_event_id", how="inner")
        .filter(pl.col("pid").is_not_null() & pl.col("tid").is_not_null())
        .sort("l_start")
    )
    spans = outer.select(
        pl.col("event_id").alias("op_event_id"),
        "pid",
        "tid",
        pl.col("start_ns").alias("op_start"),
        pl.col("end_ns").alias("op_end"),
    ).sort("op_start")
    owned = launched.join_asof(
        spans, left_on="l_start", right_on="op_start", by=["pid", "tid"], strategy="backward", check_sortedness=False
    ).filter(pl.col("op_event_id").is_not_null() & (pl.col("l_start") < pl.col("op_end")))
    per_op = owned.group_by("op_event_id").agg(
        pl.col("k_dur").sum().alias("gpu_ns"),
        pl.len().alias("kernels"),
        pl.col("k_start").min().alias("first_kernel_ns"),
        pl.col("k_device").drop_nulls().first().alias("device"),
        pl.col("k_name").str.contains(TF32_KERNEL).any().alias("_tf32"),
    )
    ops = outer.drop("bytes", "device").join(per_op, left_on="event_id", right_on="op_event_id", how="inner")
    if ops.height == 0:
        if kernels.height == 0:
            return unavailable("the trace has no GPU kernels (CPU-only trace), so operators have no GPU time to rate")
        if launched.height == 0:
            return unavailable("GPU kernels are not linked to the host calls that launched them (no correlation ids)")
        return unavailable("no GPU kernel was launched inside an operator whose shapes the trace records")

    # costs, once per distinct signature
    sig_cols = ["_base", "input_dims", "input_types", "concrete_inputs"]
    ops = ops.with_columns([pl.col(c).fill_null("") for c in sig_cols[1:]])
    sigs = ops.select(sig_cols).unique().rename({"_base": "name"})
    costs = op_costs(sigs).rename({"name": "_base"})
    ops = ops.join(costs, on=sig_cols, how="left")
    bad = ops.filter(pl.col("flops").is_null())
    reasons = tuple(
        bad.select(pl.format("{}: {}", "_base", "cost_error")).unique(maintain_order=True).to_series().head(3).to_list()
    )
    ops = ops.filter(pl.col("flops").is_not_null())
    if ops.height == 0:
        return Efficiency(
            available=False,
            reason="no operator's shapes could be costed",
            uncosted=bad.height,
            uncosted_reasons=reasons,
        )

    # the device and its peaks
    name, peaks = _device(devices, ops)
    dtype = pl.when((pl.col("dtype") == "fp32") & pl.col("_tf32")).then(pl.lit("tf32")).otherwise(pl.col("dtype"))
    ops = ops.with_columns(dtype.alias("dtype"))
    ops = _place_on_roofline(ops, peaks)
    ops = _assign_steps(ops, steps)
    ops = (
        ops.select(
            "event_id",
            "rank",
            "step",
            "device",
            pl.col("_base").alias("name"),
            "op_class",
            "shape",
            "dtype",
            "flops",
            "bytes",
            "gpu_ns",
            "kernels",
            "start_ns",
            "first_kernel_ns",
            "m",
            "n",
            "k",
            "tflops",
            "gbps",
            "intensity",
            "bound",
            "pct_of_attainable",
            "ideal_ns",
            "pid",
            "tid",
        )
        .cast(pl.Schema(OPS_SCHEMA))
        .sort("start_ns")
    )

    flops_by_dtype = (
        ops.filter(pl.col("op_class").is_in(FLOP_CLASSES) & pl.col("dtype").is_not_null())
        .group_by("dtype")
        .agg(pl.col("flops").sum())
        .sort(["flops", "dtype"], descending=[True, False])
    )
    mfu_dtype = flops_by_dtype["dtype"][0] if flops_by_dtype.height and flops_by_dtype["flops"][0] > 0 else None
    peak = peaks.tflops(mfu_dtype) if peaks is not None and mfu_dtype is not None else None
    per_step = _per_step(ops, steps, peak, kernels)
    counted = per_step.filter(pl.col("complete")) if per_step.filter(pl.col("complete")).height else per_step
    total_s = float(counted["dur_ns"].sum() or 0) / 1e9
    total_flops = float(counted["model_flops"].sum() or 0)
    # no model FLOPs in the counted steps means the matrix work was not measured (its operators'
    # shapes are not recorded there), not that none ran: MFU and the rate are unknown, not 0
    achieved = total_flops / total_s / 1e12 if total_s > 0 and total_flops > 0 else None
    mfu = achieved / peak if achieved is not None and peak else None
    reason = None
    if mfu is None:
        if mfu_dtype is not None and total_s > 0 and not total_flops:
            reason = "no GEMM, convolution or attention operator with recorded shapes ran in the counted steps"
        elif peaks is None:
            reason = (
                f"device {name!r} is not in the peak table (docs/efficiency.md lists the known ones)"
                if name
                else "the trace does not name its GPU"
            )
        elif mfu_dtype is None and ops.filter(pl.col("op_class").is_in(FLOP_CLASSES)).height:
            reason = "the trace records shapes but not dtypes (Nsight emit_nvtx), and MFU needs the dtype's peak"
        elif mfu_dtype is None:
            reason = "no GEMM, convolution or attention operator ran on the GPU"
        elif peak is None:
            reason = f"{peaks.model} has no {mfu_dtype} matrix unit in the peak table"
        else:
            reason = "no step windows"
    split: dict[str, float] = {}
    dur = float(counted["dur_ns"].sum() or 0)
    if dur > 0 and "busy_ns" in counted.columns:
        for part in ("idle", "busy_efficient", "busy_inefficient", "busy_unmodelled"):
            split[part] = float(counted[f"{part}_ns"].sum() or 0) / dur
    return Efficiency(
        available=True,
        reason=reason,
        device_name=name,
        peaks=peaks,
        ops=ops,
        by_op=summarise(ops, ["name", "op_class", "shape", "dtype"]),
        by_class=summarise(ops, ["op_class"]),
        per_step=per_step,
        mfu=mfu,
        mfu_dtype=mfu_dtype,
        peak_tflops=peak,
        achieved_tflops=achieved,
        split=split,
        uncosted=bad.height,
        uncosted_reasons=reasons,
    )


def _device(devices: pl.DataFrame, ops: pl.DataFrame) -> tuple[str | None, DevicePeaks | None]:
    """The name and peaks of the device most GPU time of the operators ran on.

    A device the trace does not name takes the name of the trace's named devices when they
    are all the same model (ROCm traces number kernels' devices apart from the properties).
    """
    main = ops.group_by("device").agg(pl.col("gpu_ns").sum()).sort(["gpu_ns", "device"], descending=[True, False])
    device = main["device"][0] if main.height else None
    names = {int(d): n for d, n in devices.select("device", "name").iter_rows() if d is not None and n}
    name = names.get(int(device)) if device is not None else None
    if name is None and len(set(names.values())) == 1:
        name = next(iter(names.values()))
    return name, device_peaks(name)


def _place_on_roofline(ops: pl.DataFrame, peaks: DevicePeaks | None) -> pl.DataFrame:
    secs = pl.col("gpu_ns").cast(pl.Float64) / 1e9
    ops = ops.with_columns(
        pl.when(pl.col("gpu_ns") > 0).then(pl.col("flops") / secs / 1e12).alias("tflops"),
        pl.when(pl.col("gpu_ns") > 0).then(pl.col("bytes") / secs / 1e9).alias("gbps"),
        pl.when(pl.col("bytes") > 0).then(pl.col("flops") / pl.col("bytes")).alias("intensity"),
    )
    if peaks is None:
        return ops.with_columns(
            pl.lit(None, dtype=pl.String).alias("bound"),
            pl.lit(None, dtype=pl.Float64).alias("pct_of_attainable"),
            pl.lit(None, dtype=pl.Float64).alias("ideal_ns"),
        )
    peak_by_dtype = {d: peaks.tflops(d) for d in ("fp32", "tf32", "bf16", "fp16", "fp8")}
    peak = pl.col("dtype").replace_strict(peak_by_dtype, default=None, return_dtype=pl.Float64)
    bw = peaks.memory_gbps
    has_flops = pl.col("op_class").is_in(FLOP_CLASSES) & (pl.col("flops") > 0)
    attainable = pl.min_horizontal(peak, pl.col("intensity") * bw / 1e3)  # TFLOP/s
    ridge = peak * 1e3 / bw  # FLOPs per byte where the roofline bends
    ops = ops.with_columns(
        pl.when(has_flops & peak.is_not_null())
        .then(pl.when(pl.col("intensity") >= ridge).then(pl.lit("compute")).otherwise(pl.lit("memory")))
        .when(~has_flops & (pl.col("bytes") > 0))
        .then(pl.lit("memory"))
        .alias("bound"),
        pl.when(has_flops & peak.is_not_null())
        .then(pl.col("tflops") / attainable)
        .when(~has_flops & (pl.col("bytes") > 0))
        .then(pl.col("gbps") / bw)
        .alias("pct_of_attainable"),
    )
    return ops.with_columns((pl.col("gpu_ns") * pl.col("pct_of_attainable").clip(0.0, 1.0)).alias("ideal_ns"))


def _assign_steps(ops: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """The step each operator's first kernel started in (null outside every step window)."""
    if steps.height == 0:
        return ops.with_columns(pl.lit(None, dtype=pl.Int64).alias("step"))
    windows = steps.select(
        pl.col("rank").cast(pl.Int32), "step", pl.col("start_ns").alias("_ws"), pl.col("end_ns").alias("_we")
    ).sort("_ws")
    placed = (
        ops.with_columns(pl.col("rank").cast(pl.Int32))
        .sort("first_kernel_ns")
        .join_asof(
            windows, left_on="first_kernel_ns", right_on="_ws", by="rank", strategy="backward", check_sortedness=False
        )
    )
    return placed.with_columns(
        pl.when(pl.col("first_kernel_ns") < pl.col("_we")).then(pl.col("step")).alias("step")
    ).drop("_ws", "_we")


def _per_step(ops: pl.DataFrame, steps: pl.DataFrame, peak: float | None, kernels: pl.DataFrame) -> pl.DataFrame:
    if steps.height == 0:
        return pl.DataFrame()
    key = ["rank", "step"]
    win = steps.with_columns(pl.col("rank").cast(pl.Int32))
    # kernel time per step on the step's device (what the what-if pricing scales)
    k = kernels.select(pl.col("k_rank").cast(pl.Int32).alias("rank"), "k_start", "k_dur", "k_device").sort("k_start")
    k = _assign_steps(k.rename({"k_start": "first_kernel_ns"}), steps).rename({"first_kernel_ns": "k_start"})
    if "device" in win.columns:
        k = k.join(win.select(*key, pl.col("device").alias("_main")), on=key, how="inner").filter(
            pl.col("_main").is_null() | (pl.col("k_device") == pl.col("_main"))
        )
    kernel_ns = k.filter(pl.col("step").is_not_null()).group_by(key).agg(pl.col("k_dur").sum().alias("kernel_ns"))
    win = win.join(kernel_ns, on=key, how="left").with_columns(pl.col("kernel_ns").fill_null(0))
    if "device" in win.columns:
        on_main = ops.join(win.select(*key, pl.col("device").alias("_main")), on=key, how="inner").filter(
            pl.col("_main").is_null() | (pl.col("device") == pl.col("_main"))
        )
    else:
        on_main = ops.filter(pl.col("step").is_not_null())
    agg = on_main.group_by(key).agg(
        pl.col("flops").filter(pl.col("op_class").is_in(FLOP_CLASSES)).sum().alias("model_flops"),
        pl.col("gpu_ns").sum().alias("_modelled_ns"),
        pl.col("ideal_ns").sum().alias("_ideal_ns"),
        pl.col("bytes").sum().alias("bytes"),
        pl.len().alias("ops"),
    )
    out = win.join(agg, on=key, how="left").with_columns(
        pl.col("model_flops").fill_null(0),
        pl.col("bytes").fill_null(0),
        pl.col("_modelled_ns").fill_null(0),
        pl.col("_ideal_ns").fill_null(0.0),
        pl.col("ops").fill_null(0),
    )
    secs = pl.col("dur_ns").cast(pl.Float64) / 1e9
    out = out.with_columns(
        pl.when(pl.col("dur_ns") > 0).then(pl.col("model_flops") / secs / 1e12).alias("tflops"),
        pl.when(pl.col("dur_ns") > 0).then(pl.col("bytes") / secs / 1e9).alias("gbps"),
    ).with_columns(
        # a step without model FLOPs has no measured MFU (null), as the trace's headline
        (pl.when(pl.col("model_flops") > 0).then(pl.col("tflops") / peak) if peak else pl.lit(None, dtype=pl.Float64)).alias("mfu"),
    )
    cols = [*key, "dur_ns", "complete", "ops", "model_flops", "bytes", "tflops", "gbps", "mfu", "kernel_ns"]
    if "gpu_busy_ns" in out.columns:
        busy = pl.col("gpu_busy_ns").fill_null(0).cast(pl.Float64)
        modelled = pl.col("_modelled_ns").cast(pl.Float64)
        # kernels of several streams can overlap: the modelled parts never exceed busy time
        scale = pl.when(modelled > busy).then(busy / modelled).otherwise(1.0)
        ideal = pl.col("_ideal_ns") * scale
        out = out.with_columns(
            busy.alias("busy_ns"),
            (pl.col("dur_ns") - busy).clip(0).alias("idle_ns"),
            ideal.alias("busy_efficient_ns"),
            ((modelled - pl.col("_ideal_ns")) * scale).alias("busy_inefficient_ns"),
            (busy - modelled * scale).clip(0).alias("busy_unmodelled_ns"),
        )
        cols += ["busy_ns", "idle_ns", "busy_efficient_ns", "busy_inefficient_ns", "busy_unmodelled_ns"]
    return out.select(cols).sort(key)


def summarise(ops: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Achieved rates of groups of operator calls (time-weighted: totals over totals)."""
    total = float(ops["gpu_ns"].sum() or 0)
    secs = pl.col("gpu_ns").cast(pl.Float64) / 1e9
    return (
        ops.group_by(by)
        .agg(
            pl.len().alias("calls"),
            pl.col("gpu_ns").sum(),
            pl.col("flops").sum(),
            pl.when(pl.col("bytes").is_not_null().any()).then(pl.col("bytes").sum()).alias("bytes"),
            pl.when(pl.col("ideal_ns").is_not_null().any()).then(pl.col("ideal_ns").sum()).alias("ideal_ns"),
            pl.col("gpu_ns").filter(pl.col("ideal_ns").is_not_null()).sum().alias("_rated_ns"),
            # the side of the ridge that holds most of the group's GPU time
            pl.col("gpu_ns").filter(pl.col("bound") == "compute").sum().alias("_compute_ns"),
            pl.col("gpu_ns").filter(pl.col("bound") == "memory").sum().alias("_memory_ns"),
        )
        .with_columns(
            pl.when(pl.col("gpu_ns") > 0).then(pl.col("flops") / secs / 1e12).alias("tflops"),
            pl.when(pl.col("gpu_ns") > 0).then(pl.col("bytes") / secs / 1e9).alias("gbps"),
            pl.when(pl.col("bytes") > 0).then(pl.col("flops") / pl.col("bytes")).alias("intensity"),
            pl.when(pl.col("_rated_ns") > 0).then(pl.col("ideal_ns") / pl.col("_rated_ns")).alias("pct_of_attainable"),
            (pl.col("gpu_ns") / total if total else pl.lit(None, dtype=pl.Float64)).alias("share_of_gpu_time"),
        )
        .with_columns(
            pl.when(pl.col("_compute_ns") + pl.col("_memory_ns") == 0)
            .then(pl.lit(None, dtype=pl.String))
            .when(pl.col("_compute_ns") >= pl.col("_memory_ns"))
            .then(pl.lit("compute"))
            .otherwise(pl.lit("memory"))
            .alias("bound")
        )
        .drop("_rated_ns", "_compute_ns", "_memory_ns")
        .sort(["gpu_ns", *by], descending=[True, *([False] * len(by))])
    )


def to_dict(eff: Efficiency, top: int = 15) -> dict[str, Any]:
    """JSON-ready summary (docs/json-report.md, ``efficiency``)."""

    def r(x: Any, nd: int = 4) -> Any:
        return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else round(float(x), nd)

    def rows(frame: pl.DataFrame, cols: list[str]) -> list[dict[str, Any]]:
        out = []
        for row in frame.iter_rows(named=True):
            out.append({c: (r(row[c]) if isinstance(row[c], float) else row[c]) for c in cols if c in row})
        return out

    measure = [
        "calls",
        "gpu_ns",
        "flops",
        "bytes",
        "tflops",
        "gbps",
        "intensity",
        "bound",
        "pct_of_attainable",
        "share_of_gpu_time",
    ]
    p = eff.peaks
    return {
        "available": eff.available,
        "mfu": r(eff.mfu),
        "mfu_dtype": eff.mfu_dtype,
        "reason": eff.reason,
        "achieved_tflops": r(eff.achieved_tflops),
        "device": {
            "name": eff.device_name,
            "model": p.model if p else None,
            "peak_tflops": {d: p.tflops(d) for d in ("fp32", "tf32", "bf16", "fp8")} if p else None,
            "memory_gbps": p.memory_gbps if p else None,
        },
        "split": {k: r(v) for k, v in eff.split.items()},
        "by_class": rows(eff.by_class, ["op_class", *measure]),
        "top_ops": rows(eff.by_op.head(top), ["name", "op_class", "shape", "dtype", *measure]),
        "steps": rows(eff.per_step, [c for c in eff.per_step.columns]) if eff.per_step.height else [],
        "uncosted_ops": eff.uncosted,
    }


# --- findings -------------------------------------------------------------------------------


def efficiency_findings(eff: Efficiency, step_ms: float | None, min_share: float) -> list[Finding]:
    """fp32 GEMMs on tensor-core hardware, small GEMMs, unfused elementwise chains.

    Costs are per complete step (all step windows when none is complete) on the steps'
    devices; a finding is reported when it costs at least ``min_share`` of the step.
    """
    if not eff.available or eff.per_step.height == 0 or not step_ms:
        return []
    steps = eff.per_step.filter(pl.col("complete")) if eff.per_step.filter(pl.col("complete")).height else eff.per_step
    n = steps.height
    ops = eff.ops.join(steps.select("rank", "step"), on=["rank", "step"], how="semi")
    if ops.height == 0:
        return []
    found: list[Finding] = []
    peaks = eff.peaks

    def make(kind: str, cost_ns: float, evidence: dict[str, Any], worst: pl.DataFrame) -> None:
        ms = cost_ns / 1e6 / n
        share = ms / step_ms
        if share < min_share:
            return
        per_step = worst.group_by("step").agg(pl.col("_cost").sum()).sort(["_cost", "step"], descending=[True, False])
        found.append(
            Finding(
                kind=kind,
                title=TITLES[kind],
                ms_per_step=ms,
                share_of_step=share,
                evidence=evidence,
                fix=FIXES[kind],
                steps_affected=per_step.filter(pl.col("_cost") > 0).height,
                worst_steps=tuple(int(s) for s in per_step.head(3)["step"].to_list()),
            )
        )

    # fp32 matrix math on a GPU with a much faster low-precision unit
    if peaks is not None and peaks.tensor_cores and peaks.bf16_tflops:
        fp32 = ops.filter(pl.col("op_class").is_in(FLOP_CLASSES) & (pl.col("dtype") == "fp32"))
        if fp32.height:
            ratio = peaks.fp32_tflops / peaks.bf16_tflops
            fp32 = fp32.with_columns((pl.col("gpu_ns") * (1 - ratio)).alias("_cost"))
            time_ns = float(fp32["gpu_ns"].sum())
            evidence: dict[str, Any] = {
                "fp32_ms_per_step": round(time_ns / 1e6 / n, 3),
                "peak_tflops": {"fp32": peaks.fp32_tflops, "tf32": peaks.tf32_tflops, "bf16": peaks.bf16_tflops},
                "saving_ms_per_step": {
                    "bf16": round(time_ns * (1 - ratio) / 1e6 / n, 3),
                    "tf32": round(time_ns * (1 - peaks.fp32_tflops / peaks.tf32_tflops) / 1e6 / n, 3)
                    if peaks.tf32_tflops
                    else None,
                },
                "ops": _top_shapes(fp32),
                "device": peaks.model,
            }
            make("fp32_gemm", float(fp32["_cost"].sum()), evidence, fp32)

    # GEMMs too small to fill the chip: less than one wave of output tiles, and slow
    if peaks is not None:
        tiles = ((pl.col("m") + TILE - 1) // TILE) * ((pl.col("n") + TILE - 1) // TILE)
        small = ops.filter(
            (pl.col("op_class") == "gemm") & (pl.col("pct_of_attainable") < SLOW_SHARE) & (tiles < peaks.sm_count)
        ).with_columns(tiles.alias("tiles"), (pl.col("gpu_ns") - pl.col("ideal_ns")).alias("_cost"))
        if small.height:
            evidence = {
                "small_gemm_ms_per_step": round(float(small["gpu_ns"].sum()) / 1e6 / n, 3),
                "sm_count": peaks.sm_count,
                "tile": TILE,
                "ops": _top_shapes(small, extra=("tiles",)),
            }
            make("small_gemm", float(small["_cost"].sum()), evidence, small)

    # runs of memory-bound operators that one fused kernel could do in a single pass
    mem = pl.col("op_class").is_in(["elementwise", "norm"])
    chained = (
        ops.sort(["pid", "tid", "start_ns"])
        .with_columns((~mem).cast(pl.Int64).cum_sum().over(["pid", "tid"]).alias("_chain"))
        .filter(mem)
    )
    chains = (
        chained.group_by(["pid", "tid", "_chain"])
        .agg(
            pl.len().alias("ops"),
            pl.col("gpu_ns").sum().alias("gpu_ns"),
            pl.col("gpu_ns").max().alias("_longest"),
            pl.col("step").first().alias("step"),
            pl.col("name").head(CHAIN_NAMES).str.join(" → ").alias("names"),
        )
        .filter(pl.col("ops") >= 2)
        .with_columns(
            (pl.col("gpu_ns") - pl.col("_longest")).alias("_cost"),
            pl.when(pl.col("ops") > CHAIN_NAMES)
            .then(pl.format("{} → … ({} ops)", "names", "ops"))
            .otherwise("names")
            .alias("names"),
        )
    )
    if chains.height:
        top = (
            chains.group_by("names")
            .agg(pl.len().alias("count"), pl.col("gpu_ns").sum(), pl.col("_cost").sum())
            .sort(["_cost", "names"], descending=[True, False])
            .head(3)
        )
        evidence = {
            "chains_per_step": round(chains.height / n, 1),
            "ops_per_chain": round(float(chains["ops"].sum()) / chains.height, 1),
            "elementwise_ms_per_step": round(float(chains["gpu_ns"].sum()) / 1e6 / n, 3),
            "achieved_gbps": _r(float(chained["bytes"].sum() or 0) / (float(chained["gpu_ns"].sum()) / 1e9) / 1e9)
            if float(chained["gpu_ns"].sum())
            else None,
            "peak_gbps": peaks.memory_gbps if peaks else None,
            "chains": [{"ops": names, "count": c, "ms_total": round(g / 1e6, 3)} for names, c, g, _ in top.iter_rows()],
        }
        make("unfused_elementwise", float(chains["_cost"].sum()), evidence, chains)
    return found


def _r(x: float | None, nd: int = 1) -> float | None:
    return None if x is None else round(x, nd)


def _top_shapes(ops: pl.DataFrame, extra: tuple[str, ...] = (), top: int = 5) -> list[dict[str, Any]]:
    agg = (
        ops.group_by(["name", "shape", "dtype"])
        .agg(
            pl.len().alias("calls"),
            pl.col("gpu_ns").sum(),
            pl.col("flops").sum(),
            *[pl.col(c).first() for c in extra],
        )
        .sort(["gpu_ns", "name", "shape"], descending=[True, False, False])
        .head(top)
    )
    out = []
    for row in agg.iter_rows(named=True):
        secs = row["gpu_ns"] / 1e9
        item = {
            "op": row["name"],
            "shape": row["shape"],
            "dtype": row["dtype"],
            "calls": row["calls"],
            "ms_total": round(row["gpu_ns"] / 1e6, 3),
            "tflops": round(row["flops"] / secs / 1e12, 2) if secs else None,
        }
        item.update({c: row[c] for c in extra})
        out.append(item)
    return out
