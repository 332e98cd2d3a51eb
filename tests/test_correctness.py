"""Numbers that add up and words that match the trace (issue 16).

Every trace here is written by hand, event by event, so the truth of each test is the loop
the events describe (which kernels ran, on which GPU, how long the host waited), never a
number the analysis computed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLE_TRACES, write_trace

import tracekit
from tracekit.analysis import diagnose
from tracekit.analysis.kernels import kernel_stats

A100 = {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 80 * 2**30, "computeMajor": 8, "computeMinor": 0, "numSms": 108}
FP32_XMMA = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"
TF32_XMMA = "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8_execute_kernel__5x_cublas"
BF16_XMMA = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"


class Loop:
    """A hand-written Kineto trace of a training loop: one host thread, one stream (µs)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.corr = 0

    def host(self, name: str, ts: float, dur: float, cat: str = "cpu_op") -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {}})

    def step(self, n: int, ts: float, dur: float) -> None:
        self.host(f"ProfilerStep#{n}", ts, dur, cat="user_annotation")

    def kernel(self, name: str, launch_ts: float, start: float, dur: float, *, grid: int = 256, api: str = "cudaLaunchKernel") -> None:
        self.corr += 1
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": api, "pid": 1, "tid": 1, "ts": launch_ts, "dur": 4,
                            "args": {"correlation": self.corr}})
        self.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": start, "dur": dur,
                            "args": {"device": 0, "stream": 7, "correlation": self.corr, "grid": [grid, 1, 1], "block": [128, 1, 1]}})

    def memory(self, ts: float, reserved: int) -> None:
        self.events.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
                            "args": {"Device Type": 1, "Device Id": 0, "Addr": 1, "Bytes": 1024,
                                     "Total Allocated": reserved // 2, "Total Reserved": reserved}})

    def write(self, path: Path, device: dict[str, Any] = A100) -> Path:
        return write_trace(path, self.events, deviceProperties=[device])


def _gemm_loop(name: str, steps: int = 6) -> Loop:
    """Each 10 ms step: 1 ms of host work, then one 8 ms GEMM, then the next step."""
    loop = Loop()
    for i in range(steps):
        t0 = 1000.0 + i * 10_000
        loop.step(i, t0, 10_000)
        loop.host("aten::mm", t0 + 1000, 20)
        loop.kernel(name, t0 + 1005, t0 + 1020, 8000)
    return loop


# --------------------------------------------------------------------------- tensor cores by data type


@pytest.mark.parametrize(
    ("name", "tensor_cores"),
    [
        (FP32_XMMA, False),  # xmma in the name, fp32 inputs and compute: FMA units, not tensor cores
        (TF32_XMMA, True),
        (BF16_XMMA, True),
        ("ampere_sgemm_128x64_nn", False),
        ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nt_align4>(cutlass_80_tensorop_s1688gemm_64x64_16x6_nt_align4::Params)", True),
    ],
)
def test_tensor_core_use_comes_from_the_data_types(tmp_path: Path, name: str, tensor_cores: bool) -> None:
    t = tracekit.read_trace(_gemm_loop(name).write(tmp_path / "t.json"), cache=False)
    stats = kernel_stats(t.events, t.links, t.devices)
    assert stats.top.filter(category="gemm/conv")["tensor_cores"].to_list() == [tensor_cores]
    assert (stats.fp32_matmul_time_ns > 0) is (not tensor_cores)


def test_fp32_xmma_gemm_on_an_a100_is_a_no_tensor_cores_finding(tmp_path: Path) -> None:
    d = diagnose(tracekit.read_trace(_gemm_loop(FP32_XMMA).write(tmp_path / "fp32.json"), cache=False))
    found = {f.kind: f for f in d.findings}
    assert "no_tensor_cores" in found
    assert found["no_tensor_cores"].evidence["fp32_matmul_kernels"] == [FP32_XMMA]
    # the GEMM is 8 ms of every 10 ms step
    assert found["no_tensor_cores"].ms_per_step == pytest.approx(8.0, rel=0.01)
    tf32 = diagnose(tracekit.read_trace(_gemm_loop(TF32_XMMA).write(tmp_path / "tf32.json"), cache=False))
    assert "no_tensor_cores" not in {f.kind for f in tf32.findings}


# --------------------------------------------------------------------------- small batch vs launch bound


def _tiny_kernel_loop(*, gemm_us: float, reserved: int | None) -> Loop:
    """Launch-bound: every 2 ms step launches 40 kernels of 5 µs, one every 40 µs (the GPU idles
    between them); one in four is a GEMM of ``gemm_us`` µs."""
    loop = Loop()
    for i in range(8):
        t0 = 1000.0 + i * 2000
        loop.step(i, t0, 2000)
        for k in range(40):
            ts = t0 + 20 + k * 40
            gemm = k % 4 == 0
            loop.kernel("ampere_sgemm_32x32_sliced1x4_tn" if gemm else "vectorized_elementwise_kernel", ts, ts + 6,
                        gemm_us if gemm else 5, grid=16 if gemm else 64)
        if reserved is not None:
            loop.memory(t0 + 10, reserved)
    return loop


def test_launch_bound_without_batch_evidence_is_one_finding_with_both_fixes(tmp_path: Path) -> None:
    d = diagnose(tracekit.read_trace(_tiny_kernel_loop(gemm_us=5, reserved=None).write(tmp_path / "t.json"), cache=False))
    kinds = [f.kind for f in d.findings]
    assert "launch_bound" in kinds
    assert "small_batch" not in kinds, "no memory evidence: the batch is not known to be small"
    fix = next(f for f in d.findings if f.kind == "launch_bound").fix
    assert "larger batch" in fix
    assert "CUDA graphs" in fix


def test_small_batch_needs_its_own_evidence_and_replaces_launch_bound(tmp_path: Path) -> None:
    # 2 GiB reserved of 80 GiB, GEMMs of 5 µs with 16 blocks on a 108-SM GPU: the batch is small
    d = diagnose(tracekit.read_trace(_tiny_kernel_loop(gemm_us=5, reserved=2 * 2**30).write(tmp_path / "t.json"), cache=False))
    kinds = [f.kind for f in d.findings]
    assert "small_batch" in kinds, kinds
    assert "launch_bound" not in kinds, kinds
    f = next(f for f in d.findings if f.kind == "small_batch")
    assert f.evidence["memory_headroom"] > 0.9
    assert f.evidence["median_gemm_us"] == pytest.approx(5.0)
    assert "batch size" in f.fix
    assert "CUDA graphs" in f.fix
    # the same loop with memory nearly full: launch-bound, not a small batch
    full = diagnose(tracekit.read_trace(_tiny_kernel_loop(gemm_us=5, reserved=70 * 2**30).write(tmp_path / "f.json"), cache=False))
    assert [f.kind for f in full.findings].count("launch_bound") == 1
    assert "small_batch" not in [f.kind for f in full.findings]


# --------------------------------------------------------------------------- CPU-only words


def test_cpu_only_findings_speak_of_the_host() -> None:
    """A CPU-only capture (sample_traces/captures/slow_dataloader: torch CPU build, no GPU)."""
    d = diagnose(tracekit.read_trace(SAMPLE_TRACES / "captures" / "slow_dataloader" / "rank0.cycle0.pt.trace.json.gz", cache=False))
    assert d.gpu_utilization is None
    f = next(f for f in d.findings if f.kind == "data_loading")
    assert "GPU" not in f.title
    assert "GPU" not in f.fix
    assert "pin_memory" not in f.fix, "pinning only helps copies to a GPU"
    assert "DataLoader" in f.title
