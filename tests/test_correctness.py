"""Numbers that add up and words that match the trace.

Every trace here is written by hand, event by event, so the truth of each test is the loop
the events describe (which kernels ran, on which GPU, how long the host waited), never a
number the analysis computed.
"""

from __future__ import annotations

import json
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
    """Each 10 ms step: 1 ms of host work, then one 8 ms GEMM that the host waits for
    (``cudaDeviceSynchronize``), then ~1 ms of host work before the next step: the GPU paces the
    loop, so a faster GEMM shortens the step."""
    loop = Loop()
    for i in range(steps):
        t0 = 1000.0 + i * 10_000
        loop.step(i, t0, 10_000)
        loop.host("aten::mm", t0 + 1000, 20)
        loop.kernel(name, t0 + 1005, t0 + 1020, 8000)
        loop.host("cudaDeviceSynchronize", t0 + 1030, 7990, cat="cuda_runtime")
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
    # what this test is about is the detection; the price is the replay's (tests/test_replay.py holds
    # it to the simulator): a saving that the 8 ms GEMM, which paces the loop, can bound
    assert 0.05 * 10.0 <= found["no_tensor_cores"].ms_per_step < 8.0
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
    from tracekit.report.text import render_text

    text = render_text(d)
    assert "host only (no GPU recorded)" in text
    assert "GPU utilization" not in text.splitlines()[2]


# --------------------------------------------------------------------------- warm-up and one statistic


def _warm_loop(*, first_call_ms: float) -> Loop:
    """Six 10 ms steps of 6 ms GPU work; the first also pays ``first_call_ms`` of cudaFree
    (cuBLAS initialising) before its GEMM."""
    loop = Loop()
    t = 1000.0
    for i in range(6):
        extra = first_call_ms * 1000 if i == 0 else 0.0
        dur = 10_000 + extra
        loop.step(i, t, dur)
        if extra:
            loop.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaFree", "pid": 1, "tid": 1, "ts": t + 100,
                                "dur": extra, "args": {"correlation": 10_000 + i}})
        loop.host("aten::mm", t + 200 + extra, 20)
        loop.kernel(BF16_XMMA, t + 205 + extra, t + 4000 + extra, 6000)
        t += dur
    return loop


def test_first_call_allocator_burst_is_warm_up_not_a_steady_state_cause(tmp_path: Path) -> None:
    d = diagnose(tracekit.read_trace(_warm_loop(first_call_ms=900).write(tmp_path / "t.json"), cache=False))
    assert d.warmup.found
    assert d.warmup.steps["step"].to_list() == [0]
    assert d.warmup.calls[0]["name"] == "cudaFree"
    assert d.steps.filter(step=0)["warmup"].item() is True
    assert d.steps.filter(step=0)["complete"].item() is False
    assert d.complete_steps == 5
    assert d.step_ms_median == pytest.approx(10.0, rel=1e-3)
    assert "allocator" not in {f.kind for f in d.findings}
    note = next(n for n in d.data_quality if n.startswith("Warm-up"))
    assert "schedule(" in note
    assert "cudaFree" in note
    # without the burst there is nothing to leave out
    clean = diagnose(tracekit.read_trace(_warm_loop(first_call_ms=0).write(tmp_path / "c.json"), cache=False))
    assert not clean.warmup.found
    assert clean.complete_steps == 6


def test_whole_trace_window_drops_the_warm_up_before_the_measured_iteration() -> None:
    """HTA's simple_add (PARAM AlexNet): 24.6 s of CUDA context creation and 15.7 s of cuDNN
    warm-up precede one measured forward pass of well under a second."""
    from conftest import shared_trace

    d = diagnose(tracekit.read_trace(shared_trace("hta/tests/data/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz")))
    assert d.warmup.found
    assert "cudaDeviceGetStreamPriorityRange" in {c["name"] for c in d.warmup.calls}
    assert d.step_ms_median is not None
    assert d.step_ms_median < 1000.0
    assert "pageable_memcpy" not in {f.kind for f in d.findings}, "context creation inside aten::to is not a pageable copy"


# The one-statistic check over every trace under ../shared runs in
# tests/test_analysis.py::test_every_real_trace_analyses (one diagnosis per trace for both).


# --------------------------------------------------------------------------- honest diffs


def test_noise_floor_comes_from_both_traces_spread() -> None:
    from tracekit.analysis.compare import noise_floor_pct

    steady = [100.0] * 9
    assert noise_floor_pct(steady, steady) == pytest.approx(1.0), "identical steps: the 1% floor"
    # before: median 100, MAD 10 → robust sd 14.826, se of the median 1.2533 × 14.826 / 3
    noisy = [80.0, 90.0, 90.0, 100.0, 100.0, 100.0, 110.0, 110.0, 120.0]
    se = 1.2533 * 1.4826 * 10.0 / 3.0
    assert noise_floor_pct(noisy, steady) == pytest.approx(2 * se, rel=1e-6)
    assert noise_floor_pct([], steady) is None


def _loop_steps(tmp_path: Path, name: str, durs_ms: list[float]) -> Path:
    loop = Loop()
    t = 1000.0
    for i, d in enumerate(durs_ms):
        loop.step(i, t, d * 1000)
        loop.host("aten::mm", t + 10, 20)
        loop.kernel(BF16_XMMA, t + 15, t + 40, d * 1000 * 0.9)
        t += d * 1000
    return loop.write(tmp_path / name)


def test_diff_verdicts(tmp_path: Path) -> None:
    from tracekit.analysis.compare import compare

    def diff(a: list[float], b: list[float]) -> Any:
        return compare(diagnose(tracekit.read_trace(_loop_steps(tmp_path, "a.json", a), cache=False)),
                       diagnose(tracekit.read_trace(_loop_steps(tmp_path, "b.json", b), cache=False)))

    steady = [10.0] * 8
    r = diff(steady, [12.0] * 8)
    assert r.verdict == "slower"
    assert r.slower_than(5.0)
    # a 3% change inside a spread of ±20% step to step is noise, not a regression
    jittery = [8.0, 12.0, 9.0, 11.0, 8.0, 12.0, 9.0, 11.0]
    r = diff(jittery, [x * 1.03 for x in jittery])
    assert r.verdict == "within_noise"
    assert r.noise_pct is not None
    assert r.noise_pct > 3.0
    assert not r.slower_than(0.0)
    # two steps are not enough to tell anything
    r = diff([10.0, 10.0], [12.0, 12.0])
    assert r.verdict == "not_comparable"
    assert any("too few complete steps" in x for x in r.verdict_reasons)
    assert not r.slower_than(0.0)


@pytest.mark.slow  # about 1,000 steps on each side; test_diff_verdicts runs by default
def test_diff_of_periodicity_steps_is_not_comparable(capsys: pytest.CaptureFixture[str]) -> None:
    """The GPUPuzzlers pair has no step markers: its "steps" are a kernel's period."""
    from conftest import shared_trace

    from tracekit.cli import main

    before = shared_trace("gpupuzzlers/streams/blocking/blocking_streams.json.gz")
    after = shared_trace("gpupuzzlers/streams/non_blocking/non_blocking_streams.json.gz")
    code = main(["diff", str(before), str(after), "--format", "json", "--fail-if-slower", "0"])
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["verdict"] == "not_comparable"
    assert any("periodicity" in r for r in doc["verdict_reasons"])
    assert code == 6, "not comparable: --fail-if-slower cannot pass or fail"
    assert "not comparable" in err


# --------------------------------------------------------------------------- .item() per element


def test_item_per_element_is_a_sync_not_a_pinning_problem(tmp_path: Path) -> None:
    """Each 10 ms step: a 2 ms kernel, then 64 ``.item()`` calls in a Python loop, each a 4-byte
    device-to-host copy into pageable memory followed by a stream sync (≈ 0.1 ms each)."""
    loop = Loop()
    t = 1000.0
    for i in range(6):
        loop.step(i, t, 10_000)
        loop.host("aten::mul", t + 10, 20)
        loop.kernel("vectorized_elementwise_kernel", t + 15, t + 40, 2000)
        at = t + 2100
        for _ in range(64):
            loop.host("aten::item", at, 110)
            loop.host("aten::_local_scalar_dense", at + 2, 106)
            loop.corr += 1
            loop.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": at + 5,
                                "dur": 10, "args": {"correlation": loop.corr}})
            loop.events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 0, "tid": 7,
                                "ts": at + 20, "dur": 2, "args": {"device": 0, "stream": 7, "correlation": loop.corr, "bytes": 4}})
            loop.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 1, "ts": at + 16,
                                "dur": 90, "args": {"correlation": loop.corr + 100_000}})
            at += 120
        t += 10_000
    d = diagnose(tracekit.read_trace(loop.write(tmp_path / "t.json"), cache=False))
    kinds = [f.kind for f in d.findings]
    assert "pageable_memcpy" not in kinds, kinds
    assert "host_device_sync" in kinds
    f = next(f for f in d.findings if f.kind == "host_device_sync")
    assert any(c["op"] == "aten::item" for c in f.evidence["sync_calls"])
    assert "element by element" in f.fix


@pytest.mark.shared
@pytest.mark.parametrize(
    "folder", ["hta/tests/data/trace_filter", pytest.param("hta/tests/data/df_index_resolver", marks=pytest.mark.slow)]
)
def test_job_per_rank_numbers_describe_the_rank_step(folder: str) -> None:
    """Each rank's ms per step in the job table (compute, exposed communication, waits) is
    stated for that rank's median step, so none exceeds it."""
    from conftest import shared_trace

    from tracekit.analysis.diagnose import diagnose_job
    from tracekit.reading.job import read_job

    m = diagnose_job(read_job(shared_trace(folder))).multirank
    for row in m.per_rank.iter_rows(named=True):
        step = row["step_ms_median"]
        if step is None:
            continue
        for key in ("gpu_busy_ms", "compute_ms", "communication_ms", "exposed_communication_ms", "wait_ms", "late_ms"):
            if row[key] is not None:
                assert row[key] <= step * (1 + 1e-9), (row["rank"], key)
