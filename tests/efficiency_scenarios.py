"""Small Kineto traces with known operator shapes, kernel times and device (the efficiency tests).

Each step runs the same list of operators on one host thread; every operator launches one
kernel of a given duration and the kernels run back to back on one stream.  Step windows
are ``ProfilerStep#N`` ranges of a fixed length, so a step's model FLOPs, its duration and
the device's peak are known exactly and MFU can be checked to the last digit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

H100 = "NVIDIA H100 80GB HBM3"
BF16, F32 = "c10::BFloat16", "float"


@dataclass(frozen=True)
class Op:
    name: str
    dims: list[Any]
    types: list[str]
    kernel: str
    kernel_us: int
    concrete: list[str] | None = None


def linear(m: int, n: int, k: int, dtype: str, kernel_us: int) -> Op:
    kernel = "ampere_sgemm_128x64_tn" if dtype == F32 else "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
    return Op("aten::linear", [[m, k], [n, k], [n]], [dtype, dtype, dtype], kernel, kernel_us)


def elementwise(name: str, shape: list[int], dtype: str, kernel_us: int) -> Op:
    kernel = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>"
    return Op(name, [shape, shape], [dtype, dtype], kernel, kernel_us)


def write(
    path: Path,
    ops: list[Op],
    *,
    steps: int = 4,
    step_us: int | None = None,
    device: str | None = H100,
    shapes: bool = True,
    shaped_steps: set[int] | None = None,
    marked_steps: int | None = None,
) -> Path:
    """Write the trace; every step lasts ``step_us`` (default: the GPU work plus 50 us).

    ``shaped_steps``: the steps whose operators record shapes (None: every step, when ``shapes``);
    ``marked_steps``: how many steps have a ``ProfilerStep`` marker (None: all; the others run
    after the last marked one, outside any counted step)."""
    gpu_us = sum(max(o.kernel_us, 1) for o in ops)
    step_us = step_us if step_us is not None else 20 * len(ops) + gpu_us + 50
    assert step_us >= 10 + gpu_us + 4, "the step must hold its GPU work"
    events: list[dict[str, Any]] = []
    corr = 0
    t0 = 1_000_000
    for s in range(steps):
        start = t0 + s * step_us
        if marked_steps is None or s < marked_steps:
            events.append(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": f"ProfilerStep#{s}",
                    "pid": 1,
                    "tid": 1,
                    "ts": start,
                    "dur": step_us,
                }
            )
        gpu = start + 10
        for i, op in enumerate(ops):
            corr += 1
            cpu = start + 1 + 2 * i
            args: dict[str, Any] = {"External id": corr}
            if shapes and (shaped_steps is None or s in shaped_steps):
                args.update({"Input Dims": op.dims, "Input type": op.types})
                if op.concrete is not None:
                    args["Concrete Inputs"] = op.concrete
            events.append(
                {"ph": "X", "cat": "cpu_op", "name": op.name, "pid": 1, "tid": 1, "ts": cpu, "dur": 2, "args": args}
            )
            events.append(
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": cpu, "dur": 1,
                 "args": {"External id": corr, "correlation": corr}}
            )  # fmt: skip
            events.append(
                {"ph": "X", "cat": "kernel", "name": op.kernel, "pid": 0, "tid": 7, "ts": gpu, "dur": op.kernel_us,
                 "args": {"External id": corr, "correlation": corr, "device": 0, "stream": 7}}
            )  # fmt: skip
            gpu += op.kernel_us
        # the loop reads a loss value at the end of the step: the host waits for the GPU
        sync_start = start + 2 + 2 * len(ops)
        events.append(
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 1, "tid": 1, "ts": sync_start,
             "dur": gpu + 2 - sync_start, "args": {"correlation": 0}}
        )  # fmt: skip
    props = (
        []
        if device is None
        else [
            {"id": 0, "name": device, "totalGlobalMem": 85 * 2**30, "computeMajor": 9, "computeMinor": 0, "numSms": 132}
        ]
    )
    doc = {"schemaVersion": 1, "deviceProperties": props, "traceEvents": events}
    path.write_text(json.dumps(doc))
    return path


#: a healthy bf16 model: large GEMMs near the peak, one normalisation
def healthy_bf16() -> list[Op]:
    return [linear(8192, 4096, 4096, BF16, 370) for _ in range(4)] + [
        Op("aten::layer_norm", [[8192, 4096], [4096], [4096]], [BF16, BF16, BF16], "vectorized_layer_norm_kernel", 60)
    ]


#: the same model without mixed precision: fp32 GEMMs at CUDA-core speed
def fp32_gemms() -> list[Op]:
    return [linear(8192, 4096, 4096, F32, 6800) for _ in range(4)]


#: a model too small for the GPU: tiny GEMMs, one output tile each
def small_gemms() -> list[Op]:
    return [linear(32, 1024, 1024, BF16, 12) for _ in range(40)] + [linear(8192, 4096, 4096, BF16, 370)]


#: an unfused activation chain around one GEMM
def unfused_chain() -> list[Op]:
    shape = [8192, 4096]
    chain = [elementwise(n, shape, BF16, 120) for n in ("aten::mul", "aten::add", "aten::mul", "aten::add")]
    return [linear(8192, 4096, 4096, BF16, 370), *chain]
