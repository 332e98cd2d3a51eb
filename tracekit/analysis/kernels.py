"""Kernels: what the GPU spent its busy time on, and how it was fed.

* the top kernels by total time, with a category (gemm, communication, copy...) and
  whether they use tensor cores (judged from the kernel name; null when the name does
  not say);
* the share of short kernels (under :data:`SHORT_KERNEL_NS`) and the launch delay
  distribution (kernel start minus the start of the call that launched it);
* fp32 matrix kernels on a GPU that has tensor cores: the ``no_tensor_cores`` evidence.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from ..schema import EventKind
from . import patterns

#: a kernel shorter than this costs about as much to launch as to run
SHORT_KERNEL_NS = 10_000
#: NVIDIA compute capability from which tensor cores exist (Volta)
TENSOR_CORE_MAJOR = 7


@dataclass(frozen=True)
class KernelStats:
    #: name, category, tensor_cores, count, total_ns, mean_ns, max_ns, share_of_kernel_time
    top: pl.DataFrame
    kernel_count: int
    kernel_time_ns: int
    short_kernel_count: int
    median_kernel_ns: float | None
    #: launch delay percentiles in ns (None when no launches are linked)
    launch_delay_ns: dict[str, float | None]
    #: time in fp32 (non tensor-core) GEMM/conv kernels on a tensor-core GPU
    fp32_matmul_time_ns: int
    fp32_matmul_names: tuple[str, ...]
    tensor_core_gpu: bool | None
    #: GEMM/convolution kernels: how many, their median duration and median grid size (thread
    #: blocks); with the device's SM count, the evidence that matrix shapes are too small to
    #: fill the GPU (``small_batch``)
    gemm_count: int = 0
    gemm_median_ns: float | None = None
    gemm_median_blocks: float | None = None
    sm_count: int | None = None


def kernel_stats(events: pl.DataFrame, links: pl.DataFrame, devices: pl.DataFrame, top_n: int = 15) -> KernelStats:
    kernels = events.filter(pl.col("kind") == EventKind.KERNEL.value)
    name = pl.col("name")
    category = (
        pl.when(name.str.contains(patterns.COMM_KERNEL)).then(pl.lit("communication"))
        .when(name.str.contains(patterns.GEMM_KERNEL)).then(pl.lit("gemm/conv"))
        .when(name.str.contains("(?i)elementwise|vectorized|unrolled|Functor|pointwise|triton_poi")).then(pl.lit("elementwise"))
        .when(name.str.contains("(?i)reduce|softmax|norm|triton_per|triton_red")).then(pl.lit("reduction/norm"))
        .when(name.str.contains("(?i)attention|flash|fmha|sdpa")).then(pl.lit("attention"))
        .otherwise(pl.lit("other"))
    )
    tensor = (
        pl.when(name.str.contains(patterns.FP32_GEMM_KERNEL)).then(pl.lit(False))
        .when(name.str.contains(patterns.TENSOR_CORE_KERNEL)).then(pl.lit(True))
        .otherwise(pl.lit(None, dtype=pl.Boolean))
    )
    total = int(kernels["dur_ns"].sum() or 0)
    top = (
        kernels.group_by("name")
        .agg(pl.len().alias("count"), pl.col("dur_ns").sum().alias("total_ns"), pl.col("dur_ns").mean().alias("mean_ns"), pl.col("dur_ns").max().alias("max_ns"))
        .with_columns(category.alias("category"), tensor.alias("tensor_cores"))
        .with_columns((pl.col("total_ns") / max(total, 1)).alias("share_of_kernel_time"))
        .sort(["total_ns", "name"], descending=[True, False])
    )
    short = kernels.filter(pl.col("dur_ns") < SHORT_KERNEL_NS)
    delays = _launch_delays(events, links)
    tc_gpu = _tensor_core_gpu(devices)
    fp32 = top.filter((pl.col("category") == "gemm/conv") & (pl.col("tensor_cores") == False))  # noqa: E712
    median = kernels["dur_ns"].median()
    gemms = kernels.filter(name.str.contains(patterns.GEMM_KERNEL) & ~name.str.contains(patterns.COMM_KERNEL))
    gemm_median = gemms["dur_ns"].median() if gemms.height else None
    gemm_blocks = gemms["grid_blocks"].drop_nulls().median() if gemms.height else None
    sms = devices["sm_count"].drop_nulls() if "sm_count" in devices.columns else pl.Series([], dtype=pl.Int32)
    return KernelStats(
        top=top.head(top_n).select("name", "category", "tensor_cores", "count", "total_ns", "mean_ns", "max_ns", "share_of_kernel_time"),
        kernel_count=kernels.height,
        kernel_time_ns=total,
        short_kernel_count=short.height,
        median_kernel_ns=float(median) if median is not None else None,  # type: ignore[arg-type]
        launch_delay_ns=delays,
        fp32_matmul_time_ns=int(fp32["total_ns"].sum() or 0) if tc_gpu else 0,
        fp32_matmul_names=tuple(fp32["name"].head(3).to_list()) if tc_gpu else (),
        tensor_core_gpu=tc_gpu,
        gemm_count=gemms.height,
        gemm_median_ns=None if gemm_median is None else float(gemm_median),  # type: ignore[arg-type]
        gemm_median_blocks=None if gemm_blocks is None else float(gemm_blocks),  # type: ignore[arg-type]
        sm_count=int(sms.min()) if sms.len() else None,  # type: ignore[arg-type]
    )


def _launch_delays(events: pl.DataFrame, links: pl.DataFrame) -> dict[str, float | None]:
    kernels = events.filter(pl.col("kind") == EventKind.KERNEL.value).select(pl.col("event_id").alias("gpu_event_id"), pl.col("start_ns").alias("_k"))
    launches = events.select(pl.col("event_id").alias("launch_event_id"), pl.col("start_ns").alias("_l"))
    d = links.join(kernels, on="gpu_event_id").join(launches, on="launch_event_id").select((pl.col("_k") - pl.col("_l")).alias("d"))
    if d.height == 0:
        return {"p50": None, "p90": None, "p99": None}
    q = d.select(
        pl.col("d").quantile(0.5).alias("p50"), pl.col("d").quantile(0.9).alias("p90"), pl.col("d").quantile(0.99).alias("p99")
    ).row(0, named=True)
    return {k: float(v) if v is not None else None for k, v in q.items()}


def _tensor_core_gpu(devices: pl.DataFrame) -> bool | None:
    nv = devices.filter(pl.col("vendor") == "nvidia")
    if nv.height == 0:
        names = devices["name"].drop_nulls().to_list()
        if any(any(m in n for m in ("V100", "A100", "H100", "H200", "B200", "A10", "L4", "L40", "T4", "RTX")) for n in names):
            return True
        return None
    majors = nv["compute_major"].drop_nulls()
    if majors.len() == 0:
        return None
    return bool(majors.max() >= TENSOR_CORE_MAJOR)  # type: ignore[operator]
