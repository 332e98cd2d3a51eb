#!/usr/bin/env python3
"""Synthetic PyTorch-profiler traces with exact ground truth.

Real traces carry no labels, so nothing can say exactly how much of a step the GPU sat idle
because of the DataLoader. This module builds small training-loop timelines from a simple,
deterministic event model (integer nanoseconds), computes the ground truth from that model
(unions of intervals, never hand-typed totals), and writes the same timeline in two formats:

* a Kineto Chrome trace (``<stem>.kineto.json``) shaped like recent PyTorch writes it;
* an Nsight Systems SQLite export (``<stem>.nsys.sqlite``) shaped like ``nsys export`` 2024.5
  (export schema 3.13.2) writes it;

plus ``<stem>.expected.json``, the truth dictionary.

Usage as a module (tests put ``scripts/`` on ``sys.path`` first)::

    import synthetic
    sc = synthetic.build("dataloader_stall")          # a Scenario; sc.truth is the answer key
    synthetic.write_kineto(sc, "x.kineto.json")
    synthetic.write_nsys(sc, "x.nsys.sqlite")
    synthetic.write_expected(sc, "x.expected.json")
    synthetic.build("multi_rank", rank=1)             # the second rank of the two-rank scenario
    synthetic.write_all("sample_traces/synthetic")    # every file, as the CLI does

Usage as a script::

    python scripts/synthetic.py --out sample_traces/synthetic
    python scripts/synthetic.py --check --out sample_traces/synthetic   # exit 1 if stale

Every output is deterministic: no wall clock, no randomness, stable key order. SQLite files are
byte-identical for a given SQLite library version (the file header records the library version
that last wrote it, so a different SQLite build may change those bytes, not the rows).

How the truth is defined (also written into every expected file under ``definitions``):

* Step windows are the CPU-side ``ProfilerStep#N`` ranges (== the NVTX ``step N`` ranges).
* GPU busy = union of kernel, memcpy and memset intervals on the device, clipped to the window.
  Compute busy = union of kernel intervals only. Idle = window minus busy.
* Cause attribution: the generator labels every stretch of the main thread's timeline with the
  cause it stands for (``data_loading``, ``host_device_sync``, ``launch_bound``,
  ``pageable_memcpy``, ``cpu_work``). An idle nanosecond is charged to the label of the CPU
  stretch it falls in. The labels tile each step window, so the causes sum to the idle time.
* ``expected_top_cause`` ranks causes by compute idle (no kernel running). For every scenario
  but ``pageable_memcpy`` the ranking by GPU idle agrees; a pageable copy keeps the copy
  engine busy while no kernel can run, so it shows up in compute idle, not in GPU idle.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import filecmp
import hashlib
import json
import os
import sqlite3
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CAUSES",
    "DIFF_PAIRS",
    "SCENARIO_NAMES",
    "Scenario",
    "build",
    "build_all",
    "dataloader_fixed",
    "dataloader_stall",
    "expected_json",
    "healthy",
    "host_sync",
    "host_sync_fixed",
    "kineto_json",
    "launch_bound",
    "main",
    "multi_rank",
    "nsys_rows",
    "pageable_memcpy",
    "write_all",
    "write_expected",
    "write_kineto",
    "write_nsys",
]

# --------------------------------------------------------------------------------------------
# Fixed parameters of the synthetic world
# --------------------------------------------------------------------------------------------

#: Session start as a UTC epoch (2026-01-01T00:00:00Z). Kineto's baseTimeNanoseconds and
#: Nsight's TARGET_INFO_SESSION_START_TIME.utcEpochNs both equal it, so
#: ``kineto ts (µs) * 1000 + baseTimeNanoseconds == nsys ns + utcEpochNs``.
SESSION_EPOCH_NS = 1_767_225_600_000_000_000
#: First step starts 1 ms into the session.
FIRST_STEP_NS = 1_000_000
#: Profiler window opens this long before the first step and closes this long after the end.
PROFILER_MARGIN_NS = 500_000

MAIN_PID = 4242  # rank r uses MAIN_PID + r; its main thread id equals its pid
STREAM = 7  # PyTorch's default (legacy) stream as CUPTI numbers it
CONTEXT = 1
SENTINEL_U32 = 4294967295  # Nsight's "n/a" for streamId/eventId of context and event syncs

# Launch timing (ns). A launch: the cpu_op opens, LEAD later the runtime call starts and lasts
# CALL; the GPU op starts LATENCY after the call starts (or when the stream frees up), and the
# cpu_op closes TAIL after the call returns.
LEAD_NS = 3_125
CALL_NS = 4_250
TAIL_NS = 1_000
LATENCY_NS = 5_500
# Synchronisation timing (ns): the sync activity row starts SYNC_ROW_DELAY after the API call,
# ends WAKE after the GPU work it waits on completes, and the call returns RETURN after that.
SYNC_ROW_DELAY_NS = 1_000
WAKE_NS = 2_000
RETURN_NS = 500
# Time a blocking copy call needs to return after its DMA finishes.
COPY_RETURN_NS = 1_500

MS = 1_000_000
US = 1_000

#: Every cause label the generator uses. The scenario's "expected" cause is one of these.
CAUSES = ("data_loading", "host_device_sync", "launch_bound", "pageable_memcpy", "cpu_work")

#: before/after pairs for diff tests.
DIFF_PAIRS = {
    "dataloader": ("dataloader_stall", "dataloader_fixed"),
    "host_sync": ("host_sync", "host_sync_fixed"),
}

SCENARIO_NAMES = (
    "healthy",
    "dataloader_stall",
    "dataloader_fixed",
    "host_sync",
    "host_sync_fixed",
    "launch_bound",
    "pageable_memcpy",
    "multi_rank",
)

DATALOADER_SINGLE = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
DATALOADER_MULTI = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
OPTIMIZER_STEP = "Optimizer.step#SGD.step"
OPTIMIZER_ZERO_GRAD = "Optimizer.zero_grad#SGD.zero_grad"

# H100 SXM as PyTorch and nsys describe it.
GPU_NAME = "NVIDIA H100 80GB HBM3"
GPU_TOTAL_MEM = 85_018_279_936
GPU_NUM_SMS = 132

# CUPTI callback ids Kineto prints as "cbid", and the versioned names nsys exports.
_RUNTIME_API = {
    "cudaLaunchKernel": (211, "cudaLaunchKernel_v7000"),
    "cudaMemcpyAsync": (41, "cudaMemcpyAsync_v3020"),
    "cudaMemsetAsync": (51, "cudaMemsetAsync_v3020"),
    "cudaStreamSynchronize": (131, "cudaStreamSynchronize_v3020"),
    "cudaDeviceSynchronize": (165, "cudaDeviceSynchronize_v3020"),
    "cudaEventRecord": (135, "cudaEventRecord_v3020"),
    "cudaEventSynchronize": (137, "cudaEventSynchronize_v3020"),
}

# CUPTI enums (the values nsys stores in its ENUM_* tables).
COPY_HTOD, COPY_DTOH = 1, 2
MEM_PAGEABLE, MEM_PINNED, MEM_DEVICE = 0, 1, 2
_MEM_KIND_LABEL = {MEM_PAGEABLE: "Pageable", MEM_PINNED: "Pinned", MEM_DEVICE: "Device"}
_COPY_KIND_LABEL = {COPY_HTOD: "HtoD", COPY_DTOH: "DtoH"}
SYNC_TYPE = {"Event Sync": 1, "Stream Sync": 3, "Context Sync": 4}


# --------------------------------------------------------------------------------------------
# The event model
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelSpec:
    """What CUPTI reports about a kernel, apart from its timing."""

    name: str  # demangled name, as Kineto prints it
    short: str  # nsys shortName
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    registers: int
    shared_mem: int  # static + dynamic, bytes
    occupancy: int  # est. achieved occupancy %


GEMM_FWD = KernelSpec(
    "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    (132, 1, 1), (384, 1, 1), 168, 213_504, 19,
)
GEMM_BWD = KernelSpec(
    "sm90_xmma_gemm_f32f32_tf32f32_f32_nt_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "sm90_xmma_gemm_f32f32_tf32f32_f32_nt_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    (132, 1, 1), (384, 1, 1), 168, 213_504, 19,
)
SGD_FOREACH = KernelSpec(
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
    "TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, "
    "std::plus<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<2>, "
    "at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float)",
    "multi_tensor_apply_kernel",
    (320, 1, 1), (512, 1, 1), 40, 0, 50,
)
TINY_ADD = KernelSpec(
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)",
    "vectorized_elementwise_kernel",
    (2, 1, 1), (128, 1, 1), 26, 0, 1,
)
NCCL_ALLREDUCE = KernelSpec(
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
    (2, 1, 1), (640, 1, 1), 96, 9_216, 0,
)


@dataclass(frozen=True)
class CpuOp:
    """A ``cpu_op`` or ``user_annotation`` range on a CPU thread."""

    name: str
    cat: str
    tid: int
    start: int
    end: int
    ext_id: int
    args: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class RuntimeCall:
    """A CUDA runtime API call (Kineto ``cuda_runtime``; nsys RUNTIME eventClass 0)."""

    name: str
    tid: int
    start: int
    end: int
    correlation: int
    ext_id: int | None


@dataclass(frozen=True)
class GpuOp:
    """A kernel, memcpy or memset executed on the GPU."""

    kind: str  # "kernel" | "memcpy" | "memset"
    name: str
    start: int
    end: int
    correlation: int
    ext_id: int | None
    device: int
    stream: int
    kernel: KernelSpec | None = None
    nbytes: int = 0
    copy_kind: int = 0
    src_kind: int = 0
    dst_kind: int = 0
    extra_args: tuple[tuple[str, Any], ...] = ()

    @property
    def dur(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class SyncOp:
    """A CUPTI synchronization record (Kineto ``cuda_sync``; nsys SYNCHRONIZATION)."""

    kind: str  # "Stream Sync" | "Event Sync" | "Context Sync"
    start: int
    end: int
    correlation: int
    ext_id: int | None
    device: int
    stream: int | None  # None where the sync is not on a stream
    event_id: int | None = None
    event_record_corr: int | None = None


@dataclass(frozen=True)
class NvtxRange:
    text: str
    tid: int
    start: int
    end: int


@dataclass(frozen=True)
class Step:
    number: int
    start: int
    end: int


@dataclass(frozen=True)
class Segment:
    """A stretch of the main thread's timeline and the idle cause it stands for."""

    start: int
    end: int
    cause: str


@dataclass
class Scenario:
    """One synthetic capture: the event model, where it came from, and its ground truth."""

    name: str
    stem: str  # file name stem: name, or name.rankR
    description: str
    rank: int
    world_size: int
    pid: int
    tid: int
    device: int
    stream: int
    n_devices: int
    steps: list[Step]
    cpu_ops: list[CpuOp]
    runtime: list[RuntimeCall]
    gpu_ops: list[GpuOp]
    syncs: list[SyncOp]
    nvtx: list[NvtxRange]
    segments: list[Segment]
    profiler_start: int
    profiler_end: int
    truth: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# Timeline builder: a single CPU thread driving one CUDA stream
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Event:
    event_id: int
    record_corr: int
    done_at: int  # GPU time the event completes


class _Builder:
    """Simulates one Python training thread launching work onto one stream.

    ``now`` is the CPU cursor; every advance is recorded as a Segment labelled with the current
    cause. ``tail`` is when the stream drains. GPU ops start at
    ``max(call start + latency, tail)`` and run back to back once the CPU is ahead.
    """

    def __init__(self, *, pid: int, device: int, stream: int = STREAM, start: int = FIRST_STEP_NS) -> None:
        self.pid = pid
        self.tid = pid
        self.device = device
        self.stream = stream
        self.now = start
        self.tail = 0
        self._ext = 0
        self._corr = 0
        self._event = 0
        self._cause = "launch_bound"
        self._open: list[int] = []  # External ids of open CPU ranges, innermost last
        self.cpu_ops: list[CpuOp] = []
        self.runtime: list[RuntimeCall] = []
        self.gpu_ops: list[GpuOp] = []
        self.syncs: list[SyncOp] = []
        self.nvtx: list[NvtxRange] = []
        self.steps: list[Step] = []
        self.segments: list[Segment] = []

    # -- CPU time ---------------------------------------------------------------------------
    def advance(self, ns: int) -> None:
        assert ns >= 0, ns
        if ns == 0:
            return
        end = self.now + ns
        last = self.segments[-1] if self.segments else None
        if last is not None and last.end == self.now and last.cause == self._cause:
            self.segments[-1] = Segment(last.start, end, self._cause)
        else:
            self.segments.append(Segment(self.now, end, self._cause))
        self.now = end

    def wait_until(self, t: int) -> None:
        self.advance(max(0, t - self.now))

    @contextlib.contextmanager
    def cause(self, label: str) -> Iterator[None]:
        assert label in CAUSES, label
        saved, self._cause = self._cause, label
        try:
            yield
        finally:
            self._cause = saved

    @contextlib.contextmanager
    def op(self, name: str, cat: str = "cpu_op", args: tuple[tuple[str, Any], ...] = ()) -> Iterator[int]:
        self._ext += 1
        ext, start = self._ext, self.now
        self._open.append(ext)
        try:
            yield ext
        finally:
            self._open.pop()
            self.cpu_ops.append(CpuOp(name, cat, self.tid, start, self.now, ext, args))

    @contextlib.contextmanager
    def nvtx_range(self, text: str) -> Iterator[None]:
        start = self.now
        try:
            yield
        finally:
            self.nvtx.append(NvtxRange(text, self.tid, start, self.now))

    @contextlib.contextmanager
    def step(self, number: int) -> Iterator[None]:
        start = self.now
        with self.nvtx_range(f"step {number}"), self.op(f"ProfilerStep#{number}", "user_annotation"):
            yield
        self.steps.append(Step(number, start, self.now))

    # -- CUDA calls -------------------------------------------------------------------------
    def _call(self, name: str, start: int, end: int) -> int:
        self._corr += 1
        ext = self._open[-1] if self._open else None
        self.runtime.append(RuntimeCall(name, self.tid, start, end, self._corr, ext))
        return self._corr

    def _gpu(self, kind: str, name: str, start: int, dur: int, corr: int, **kw: Any) -> GpuOp:
        ext = self._open[-1] if self._open else None
        op = GpuOp(kind, name, start, start + dur, corr, ext, self.device, self.stream, **kw)
        self.gpu_ops.append(op)
        self.tail = op.end
        return op

    def launch(
        self,
        spec: KernelSpec,
        dur: int,
        *,
        op_name: str | None,
        lead: int = LEAD_NS,
        call: int = CALL_NS,
        tail: int = TAIL_NS,
        latency: int = LATENCY_NS,
        extra_args: tuple[tuple[str, Any], ...] = (),
        op_args: tuple[tuple[str, Any], ...] = (),
    ) -> GpuOp:
        """cudaLaunchKernel from inside a cpu_op named ``op_name`` (None: no op of its own)."""
        with self.op(op_name, args=op_args) if op_name else contextlib.nullcontext():
            self.advance(lead)
            t = self.now
            corr = self._call("cudaLaunchKernel", t, t + call)
            k = self._gpu("kernel", spec.name, max(t + latency, self.tail), dur, corr, kernel=spec,
                          extra_args=extra_args)
            self.advance(call)
            self.advance(tail)
        return k

    def memcpy(self, nbytes: int, dur: int, *, copy_kind: int, src: int, dst: int, blocking: bool) -> GpuOp:
        """cudaMemcpyAsync; a blocking copy (pageable memory) returns only when the DMA is done."""
        self.advance(LEAD_NS)
        t = self.now
        start = max(t + LATENCY_NS, self.tail)
        end = start + dur + COPY_RETURN_NS if blocking else t + CALL_NS
        corr = self._call("cudaMemcpyAsync", t, end)
        direction = _COPY_KIND_LABEL[copy_kind]
        name = f"Memcpy {direction} ({_MEM_KIND_LABEL[src]} -> {_MEM_KIND_LABEL[dst]})"
        op = self._gpu("memcpy", name, start, dur, corr, nbytes=nbytes, copy_kind=copy_kind, src_kind=src,
                       dst_kind=dst)
        self.wait_until(end)
        self.advance(TAIL_NS)
        return op

    def memset(self, nbytes: int, dur: int) -> GpuOp:
        self.advance(LEAD_NS)
        t = self.now
        corr = self._call("cudaMemsetAsync", t, t + CALL_NS)
        op = self._gpu("memset", "Memset (Device)", max(t + LATENCY_NS, self.tail), dur, corr, nbytes=nbytes,
                       dst_kind=MEM_DEVICE)
        self.advance(CALL_NS)
        self.advance(TAIL_NS)
        return op

    def _blocking_sync(self, api: str, kind: str, done_at: int, *, stream: int | None,
                       event: _Event | None = None) -> SyncOp:
        self.advance(LEAD_NS)
        t = self.now
        row_start = t + SYNC_ROW_DELAY_NS
        row_end = max(done_at, row_start) + WAKE_NS
        corr = self._call(api, t, row_end + RETURN_NS)
        ext = self._open[-1] if self._open else None
        s = SyncOp(kind, row_start, row_end, corr, ext, self.device, stream,
                   event.event_id if event else None, event.record_corr if event else None)
        self.syncs.append(s)
        self.wait_until(row_end + RETURN_NS)
        self.advance(TAIL_NS)
        return s

    def stream_sync(self) -> SyncOp:
        return self._blocking_sync("cudaStreamSynchronize", "Stream Sync", self.tail, stream=self.stream)

    def device_sync(self) -> SyncOp:
        return self._blocking_sync("cudaDeviceSynchronize", "Context Sync", self.tail, stream=None)

    def event_record(self) -> _Event:
        self.advance(LEAD_NS)
        t = self.now
        corr = self._call("cudaEventRecord", t, t + 2_000)
        self._event += 1
        self.advance(2_000)
        return _Event(self._event, corr, self.tail)

    def event_sync(self, ev: _Event) -> SyncOp:
        return self._blocking_sync("cudaEventSynchronize", "Event Sync", ev.done_at, stream=None, event=ev)


# --------------------------------------------------------------------------------------------
# Training-step building blocks
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Body:
    """The GPU work of one step: forward, backward, optimizer kernels (durations in ns)."""

    fwd: tuple[int, ...]
    bwd: tuple[int, ...]
    opt: tuple[int, ...]

    @property
    def kernel_ns(self) -> int:
        return sum(self.fwd) + sum(self.bwd) + sum(self.opt)


#: 60 ms of kernels: 10 x 2 ms forward GEMMs, 10 x 3.5 ms backward GEMMs, 2 x 2.5 ms SGD.
BODY_60MS = Body(fwd=(2 * MS,) * 10, bwd=(3_500 * US,) * 10, opt=(2_500 * US,) * 2)
#: 49.4 ms of kernels (plus a 0.5 ms pinned copy and a 0.1 ms memset = 50 ms of GPU work).
BODY_HEALTHY = Body(fwd=(800 * US,) * 20, bwd=(1_600 * US,) * 20, opt=(700 * US,) * 2)


def _launch_body(b: _Builder, body: Body, *, allreduce: tuple[int, int] | None = None,
                 world_size: int = 1) -> None:
    """Forward, backward (and an optional all-reduce), optimizer; every launch is quick."""
    with b.nvtx_range("forward"):
        for dur in body.fwd:
            b.launch(GEMM_FWD, dur, op_name="aten::linear")
    with b.nvtx_range("backward"):
        for dur in body.bwd:
            b.launch(GEMM_BWD, dur, op_name="autograd::engine::evaluate_function: AddmmBackward0")
        if allreduce is not None:
            comm_ns, wait_ns = allreduce
            nelems = 16_777_216
            ranks = json.dumps(list(range(world_size)))
            coll = (
                ("Collective name", "allreduce"), ("In msg nelems", nelems), ("Out msg nelems", nelems),
                ("Group size", world_size), ("dtype", "Float"), ("In split size", "[]"),
                ("Out split size", "[]"), ("Process Group Name", "0"),
                ("Process Group Description", "default_pg"), ("Process Group Ranks", ranks),
            )
            with b.op("c10d::allreduce_"):
                b.launch(NCCL_ALLREDUCE, comm_ns + wait_ns, op_name="record_param_comms", extra_args=coll,
                         op_args=coll)
    with b.nvtx_range("optimizer"), b.op(OPTIMIZER_STEP, "user_annotation"):
        for dur in body.opt:
            b.launch(SGD_FOREACH, dur, op_name="aten::_foreach_add_")


def _item_sync(b: _Builder) -> SyncOp:
    """``loss.item()``: a 4-byte DtoH copy into pinned memory, then cudaStreamSynchronize."""
    with b.op("aten::item"), b.op("aten::_local_scalar_dense"):
        b.memcpy(4, 1_500, copy_kind=COPY_DTOH, src=MEM_DEVICE, dst=MEM_PINNED, blocking=False)
        return b.stream_sync()


def _finish(b: _Builder) -> None:
    """After the last step: ``torch.cuda.synchronize()`` before the profiler stops."""
    with b.cause("cpu_work"):
        b.advance(20 * US)
        b.device_sync()
        b.advance(20 * US)


# --------------------------------------------------------------------------------------------
# Scenarios
# --------------------------------------------------------------------------------------------


def _scn_healthy(b: _Builder) -> dict[str, Any]:
    """CPU runs a step ahead (syncs on the previous step's event); GPU never drains."""
    prev: _Event | None = None
    for n in range(1, 9):
        with b.step(n):
            with b.cause("data_loading"), b.nvtx_range("data loading"), b.op(DATALOADER_MULTI, "user_annotation"):
                b.advance(150 * US)
            with b.op("aten::to"), b.op("aten::_to_copy"), b.op("aten::copy_"):
                b.memcpy(8 * 1024 * 1024, 500 * US, copy_kind=COPY_HTOD, src=MEM_PINNED, dst=MEM_DEVICE,
                         blocking=False)
            with b.op(OPTIMIZER_ZERO_GRAD, "user_annotation"), b.op("aten::zero_"), b.op("aten::fill_"):
                b.memset(4 * 1024 * 1024, 100 * US)
            _launch_body(b, BODY_HEALTHY)
            ev = b.event_record()
            if prev is not None:
                with b.cause("host_device_sync"):
                    b.event_sync(prev)
            prev = ev
    _finish(b)
    return {
        "summary": "GPU saturated: kernels back to back, CPU one step ahead (waits on the previous step's "
                   "CUDA event). No idle cause should be reported.",
        "expected_top_cause": None,
        "headline": {"gpu_work_ns_per_step": 50 * MS},
    }


def _scn_dataloader(b: _Builder, dl_ns: int, dl_name: str) -> None:
    for n in range(1, 9):
        with b.step(n):
            with b.cause("data_loading"), b.nvtx_range("data loading"), b.op(dl_name, "user_annotation"):
                b.advance(dl_ns)
            _launch_body(b, BODY_60MS)
            with b.cause("host_device_sync"):
                _item_sync(b)
    _finish(b)


def _scn_dataloader_stall(b: _Builder) -> dict[str, Any]:
    _scn_dataloader(b, 40 * MS, DATALOADER_SINGLE)
    return {
        "summary": "Single-process DataLoader: each step opens with 40 ms of data loading on the main thread "
                   "while the GPU idles, then 60 ms of kernels launched quickly, then loss.item().",
        "expected_top_cause": "data_loading",
        "headline": {"data_loading_idle_ns_per_step": 40 * MS, "kernel_ns_per_step": 60 * MS},
    }


def _scn_dataloader_fixed(b: _Builder) -> dict[str, Any]:
    _scn_dataloader(b, 2 * MS, DATALOADER_MULTI)
    return {
        "summary": "After the fix (num_workers>0): loading is overlapped in worker processes; the main thread "
                   "waits 2 ms per step for the next batch. Same 60 ms of kernels and loss.item().",
        "expected_top_cause": "data_loading",
        "headline": {"data_loading_idle_ns_per_step": 2 * MS, "kernel_ns_per_step": 60 * MS},
    }


def _scn_host_sync(b: _Builder) -> dict[str, Any]:
    for n in range(1, 9):
        with b.step(n):
            _launch_body(b, BODY_60MS)
            with b.cause("host_device_sync"):
                _item_sync(b)
                with b.op("log_metrics", "user_annotation"):
                    b.advance(15 * MS)
    _finish(b)
    return {
        "summary": "After each step's kernels, loss.item() (cudaStreamSynchronize) drains the GPU, then 15 ms "
                   "of CPU work (logging) runs before the next launch: ~15 ms GPU idle per step.",
        "expected_top_cause": "host_device_sync",
        "headline": {"host_device_sync_idle_ns_per_step": 15 * MS + _POST_DRAIN_NS,
                     "post_sync_cpu_work_ns_per_step": 15 * MS, "kernel_ns_per_step": 60 * MS},
    }


def _scn_host_sync_fixed(b: _Builder) -> dict[str, Any]:
    prev: _Event | None = None
    for n in range(1, 9):
        with b.step(n):
            _launch_body(b, BODY_60MS)
            with b.op("aten::to"), b.op("aten::_to_copy"), b.op("aten::copy_"):
                b.memcpy(4, 1_500, copy_kind=COPY_DTOH, src=MEM_DEVICE, dst=MEM_PINNED, blocking=False)
            ev = b.event_record()
            if prev is not None:
                with b.cause("host_device_sync"):
                    b.event_sync(prev)
            prev = ev
            with b.cause("cpu_work"), b.op("log_metrics", "user_annotation"):
                b.advance(15 * MS)
    _finish(b)
    return {
        "summary": "After the fix: the loss is copied non_blocking and read one step later (cudaEventSynchronize "
                   "on the previous step's event); the 15 ms of logging overlaps GPU work.",
        "expected_top_cause": None,
        "headline": {"host_device_sync_idle_ns_per_step": 0, "kernel_ns_per_step": 60 * MS},
    }


LAUNCH_BOUND_KERNELS = 400
LAUNCH_BOUND_STEPS = 2


def _scn_launch_bound(b: _Builder) -> dict[str, Any]:
    # Each tiny op takes 10 µs of CPU: 1 µs before the call, 4 µs call, 5 µs after. The kernel
    # starts 3 µs into the call and runs 2 µs, so it lies wholly inside its op.
    half = LAUNCH_BOUND_KERNELS // 2
    for n in range(1, LAUNCH_BOUND_STEPS + 1):
        with b.step(n):
            for phase, op_name in (("forward", "aten::add"), ("backward", "aten::add_")):
                with b.nvtx_range(phase):
                    for _ in range(half):
                        b.launch(TINY_ADD, 2 * US, op_name=op_name, lead=1 * US, call=4 * US, tail=5 * US,
                                 latency=3 * US)
    _finish(b)
    return {
        "summary": f"{LAUNCH_BOUND_KERNELS} tiny kernels (2 µs) per step, one launched every 10 µs: the CPU "
                   "cannot launch fast enough, GPU busy 20%.",
        "expected_top_cause": "launch_bound",
        "headline": {"launch_bound_idle_ns_per_step": LAUNCH_BOUND_KERNELS * 8 * US,
                     "kernel_ns_per_step": LAUNCH_BOUND_KERNELS * 2 * US, "gpu_busy_fraction": 0.2},
    }


PAGEABLE_BYTES = 512 * 1024 * 1024


def _scn_pageable(b: _Builder) -> dict[str, Any]:
    for n in range(1, 9):
        with b.step(n):
            with b.cause("pageable_memcpy"), b.op("aten::to"), b.op("aten::_to_copy"), b.op("aten::copy_"):
                b.memcpy(PAGEABLE_BYTES, 25 * MS, copy_kind=COPY_HTOD, src=MEM_PAGEABLE, dst=MEM_DEVICE,
                         blocking=True)
            _launch_body(b, BODY_60MS)
            with b.cause("host_device_sync"):
                _item_sync(b)
    _finish(b)
    return {
        "summary": "Each step starts with a 25 ms host-to-device copy of 512 MiB of pageable memory; "
                   "cudaMemcpyAsync blocks the CPU for the whole copy, so no kernel runs meanwhile.",
        "expected_top_cause": "pageable_memcpy",
        "headline": {"pageable_memcpy_ns_per_step": 25 * MS, "pageable_memcpy_bytes_per_step": PAGEABLE_BYTES,
                     "kernel_ns_per_step": 60 * MS},
    }


ALLREDUCE_COMM_NS = 3 * MS
STRAGGLE_NS = 5 * MS


def _scn_multi_rank(b: _Builder, rank: int) -> dict[str, Any]:
    # Rank 1 straggles: its last backward kernel runs 5 ms longer, so it reaches the all-reduce 5 ms
    # late. Rank 0's all-reduce kernel starts on time and spins 5 ms waiting; both end together.
    straggler = 1
    extra = STRAGGLE_NS if rank == straggler else 0
    wait = STRAGGLE_NS if rank != straggler else 0
    body = Body(fwd=BODY_60MS.fwd, bwd=(*BODY_60MS.bwd[:-1], BODY_60MS.bwd[-1] + extra), opt=BODY_60MS.opt)
    for n in range(1, 9):
        with b.step(n):
            _launch_body(b, body, allreduce=(ALLREDUCE_COMM_NS, wait), world_size=2)
            with b.cause("host_device_sync"):
                _item_sync(b)
    _finish(b)
    return {
        "summary": "Two DDP ranks; rank 1's backward runs 5 ms longer each step, so rank 0 waits 5 ms inside "
                   "its ncclDevKernel_AllReduce_Sum_f32_RING_LL kernel (8 ms there vs 3 ms on rank 1). "
                   "Both ranks' all-reduces end at the same instant; step windows match across ranks.",
        "expected_top_cause": None,
        "headline": {
            "straggler_rank": straggler,
            "straggle_ns_per_step": STRAGGLE_NS,
            "allreduce_comm_ns": ALLREDUCE_COMM_NS,
            "allreduce_ns_per_step": ALLREDUCE_COMM_NS + wait,
            "allreduce_wait_ns_per_step": wait,
            "kernel_ns_per_step": body.kernel_ns + ALLREDUCE_COMM_NS + wait,
            # The same numbers for both ranks, so either file tells the whole story.
            "by_rank": {
                str(r): {
                    "allreduce_ns_per_step": ALLREDUCE_COMM_NS + (STRAGGLE_NS if r != straggler else 0),
                    "allreduce_wait_ns_per_step": STRAGGLE_NS if r != straggler else 0,
                    "compute_kernel_ns_per_step": BODY_60MS.kernel_ns + (STRAGGLE_NS if r == straggler else 0),
                }
                for r in (0, 1)
            },
        },
    }


# Idle between the GPU draining and the sync call's return, then the tails of the enclosing ops
# (cudaStreamSynchronize tail inside aten::_local_scalar_dense). Used for the host_sync headline.
_POST_DRAIN_NS = WAKE_NS + RETURN_NS + TAIL_NS

# Compute idle charged to pageable_memcpy beyond the 25 ms copy: the cpu_op lead-in, the launch
# latency before the DMA starts, the call's return after it, and the op tail.
_PAGEABLE_OVERHEAD_NS = LEAD_NS + LATENCY_NS + COPY_RETURN_NS + TAIL_NS

_BUILDERS = {
    "healthy": _scn_healthy,
    "dataloader_stall": _scn_dataloader_stall,
    "dataloader_fixed": _scn_dataloader_fixed,
    "host_sync": _scn_host_sync,
    "host_sync_fixed": _scn_host_sync_fixed,
    "launch_bound": _scn_launch_bound,
    "pageable_memcpy": _scn_pageable,
}


def build(name: str, rank: int = 0) -> Scenario:
    """Build one scenario (``rank`` only matters for ``multi_rank``: 0 or 1)."""
    if name not in SCENARIO_NAMES:
        raise ValueError(f"unknown scenario {name!r}; choose from {', '.join(SCENARIO_NAMES)}")
    multi = name == "multi_rank"
    if not multi and rank != 0:
        raise ValueError(f"scenario {name!r} has a single rank")
    if multi and rank not in (0, 1):
        raise ValueError("multi_rank has ranks 0 and 1")
    b = _Builder(pid=MAIN_PID + rank, device=rank if multi else 0)
    intent = _scn_multi_rank(b, rank) if multi else _BUILDERS[name](b)
    sc = Scenario(
        name=name,
        stem=f"{name}.rank{rank}" if multi else name,
        description=intent["summary"],
        rank=rank,
        world_size=2 if multi else 1,
        pid=b.pid,
        tid=b.tid,
        device=b.device,
        stream=b.stream,
        n_devices=2 if multi else 1,
        steps=sorted(b.steps, key=lambda s: s.start),
        cpu_ops=sorted(b.cpu_ops, key=lambda o: (o.start, -o.end, o.ext_id)),
        runtime=b.runtime,
        gpu_ops=b.gpu_ops,
        syncs=b.syncs,
        nvtx=sorted(b.nvtx, key=lambda r: (r.start, -r.end)),
        segments=b.segments,
        profiler_start=FIRST_STEP_NS - PROFILER_MARGIN_NS,
        profiler_end=max(b.now, b.tail) + PROFILER_MARGIN_NS,
    )
    sc.truth = _truth(sc, intent)
    _check_obvious(sc)
    return sc


# One function per scenario, for readers who prefer calling them by name.
def healthy() -> Scenario:
    return build("healthy")


def dataloader_stall() -> Scenario:
    return build("dataloader_stall")


def dataloader_fixed() -> Scenario:
    return build("dataloader_fixed")


def host_sync() -> Scenario:
    return build("host_sync")


def host_sync_fixed() -> Scenario:
    return build("host_sync_fixed")


def launch_bound() -> Scenario:
    return build("launch_bound")


def pageable_memcpy() -> Scenario:
    return build("pageable_memcpy")


def multi_rank(rank: int) -> Scenario:
    return build("multi_rank", rank)


def build_all() -> list[Scenario]:
    """Every scenario in SCENARIO_NAMES order; multi_rank contributes rank 0 then rank 1."""
    out: list[Scenario] = []
    for name in SCENARIO_NAMES:
        ranks = (0, 1) if name == "multi_rank" else (0,)
        out.extend(build(name, r) for r in ranks)
    _check_multi_rank([s for s in out if s.name == "multi_rank"])
    return out


# --------------------------------------------------------------------------------------------
# Ground truth
# --------------------------------------------------------------------------------------------


def _union(intervals: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            if e > merged[-1][1]:
                merged[-1] = (merged[-1][0], e)
        else:
            merged.append((s, e))
    return merged


def _clip(intervals: Sequence[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    return [(max(s, lo), min(e, hi)) for s, e in intervals if e > lo and s < hi]


def _complement(busy: Sequence[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    gaps, t = [], lo
    for s, e in busy:
        if s > t:
            gaps.append((t, s))
        t = max(t, e)
    if t < hi:
        gaps.append((t, hi))
    return gaps


def _length(intervals: Sequence[tuple[int, int]]) -> int:
    return sum(e - s for s, e in intervals)


def _attribute(idle: Sequence[tuple[int, int]], segments: Sequence[Segment]) -> dict[str, int]:
    out: Counter[str] = Counter()
    for s, e in idle:
        for seg in segments:
            lo, hi = max(s, seg.start), min(e, seg.end)
            if hi > lo:
                out[seg.cause] += hi - lo
    return dict(sorted(out.items()))


def _window_stats(sc: Scenario, lo: int, hi: int) -> dict[str, Any]:
    gpu = _clip(_union([(o.start, o.end) for o in sc.gpu_ops]), lo, hi)
    kern = _clip(_union([(o.start, o.end) for o in sc.gpu_ops if o.kind == "kernel"]), lo, hi)
    idle = _complement(gpu, lo, hi)
    cidle = _complement(kern, lo, hi)
    by_cause, cby_cause = _attribute(idle, sc.segments), _attribute(cidle, sc.segments)
    assert sum(by_cause.values()) == _length(idle), "cause labels must tile the window"
    assert sum(cby_cause.values()) == _length(cidle), "cause labels must tile the window"
    return {
        "gpu_busy_ns": _length(gpu),
        "gpu_idle_ns": _length(idle),
        "idle_by_cause": by_cause,
        "kernel_busy_ns": _length(kern),
        "compute_idle_ns": _length(cidle),
        "compute_idle_by_cause": cby_cause,
    }


def _per_kind(ops: Sequence[GpuOp]) -> dict[str, Any]:
    return {"count": len(ops), "time_sum_ns": sum(o.dur for o in ops), "bytes": sum(o.nbytes for o in ops)}


def _rank_causes(by_cause: dict[str, int]) -> list[str]:
    return [c for c, ns in sorted(by_cause.items(), key=lambda kv: (-kv[1], kv[0])) if ns > 0]


def _truth(sc: Scenario, intent: dict[str, Any]) -> dict[str, Any]:
    per_step = []
    for st in sc.steps:
        row: dict[str, Any] = {"step": st.number, "start_ns": st.start, "end_ns": st.end,
                               "duration_ns": st.end - st.start}
        row.update(_window_stats(sc, st.start, st.end))
        per_step.append(row)
    window = sum(r["duration_ns"] for r in per_step)
    tot: dict[str, Any] = {"window_ns": window}
    for key in ("gpu_busy_ns", "gpu_idle_ns", "kernel_busy_ns", "compute_idle_ns"):
        tot[key] = sum(r[key] for r in per_step)
    for key in ("idle_by_cause", "compute_idle_by_cause"):
        acc: Counter[str] = Counter()
        for r in per_step:
            acc.update(r[key])
        tot[key] = dict(sorted(acc.items()))
    tot["gpu_busy_fraction"] = round(tot["gpu_busy_ns"] / window, 6)
    tot["kernel_busy_fraction"] = round(tot["kernel_busy_ns"] / window, 6)

    kernels = [o for o in sc.gpu_ops if o.kind == "kernel"]
    memcpys = [o for o in sc.gpu_ops if o.kind == "memcpy"]
    memsets = [o for o in sc.gpu_ops if o.kind == "memset"]
    by_copy: dict[str, list[GpuOp]] = {}
    for o in memcpys:
        by_copy.setdefault(o.name, []).append(o)
    by_kernel: dict[str, list[GpuOp]] = {}
    for o in kernels:
        by_kernel.setdefault(o.kernel.short if o.kernel else o.name, []).append(o)

    kineto_counts = _kineto_event_counts(sc)
    nsys_counts = {table: len(rows) for table, (_cols, rows) in nsys_rows(sc).items()}
    ranking = _rank_causes(tot["compute_idle_by_cause"])
    expected = intent["expected_top_cause"]
    return {
        "scenario": sc.name,
        "file_stem": sc.stem,
        "summary": intent["summary"],
        "expected_top_cause": expected,
        "cause_ranking_by_compute_idle": ranking,
        "cause_ranking_by_gpu_idle": _rank_causes(tot["idle_by_cause"]),
        "headline": intent["headline"],
        "process": {"pid": sc.pid, "main_tid": sc.tid, "device": sc.device, "stream": sc.stream,
                    "rank": sc.rank, "world_size": sc.world_size},
        "time_base": {"unit": "ns", "session_epoch_ns": SESSION_EPOCH_NS,
                      "kineto_baseTimeNanoseconds": SESSION_EPOCH_NS, "nsys_utcEpochNs": SESSION_EPOCH_NS,
                      "note": "times below are session ns == nsys start/end; Kineto ts (µs) * 1000 == same ns"},
        "steps": {"count": len(sc.steps), "numbers": [s.number for s in sc.steps],
                  "first_start_ns": sc.steps[0].start, "last_end_ns": sc.steps[-1].end},
        "per_step": per_step,
        "totals": tot,
        "kernels": {"count": len(kernels), "time_sum_ns": sum(o.dur for o in kernels),
                    "by_short_name": {k: _per_kind(v) for k, v in sorted(by_kernel.items())}},
        "memcpy": dict(_per_kind(memcpys), by_name={k: _per_kind(v) for k, v in sorted(by_copy.items())}),
        "memset": _per_kind(memsets),
        "sync": {"count": len(sc.syncs), "by_kind": dict(sorted(Counter(s.kind for s in sc.syncs).items())),
                 "blocking_api_ns": sum(r.end - r.start for r in sc.runtime if r.name in _SYNC_APIS)},
        "runtime": {"count": len(sc.runtime), "by_name": dict(sorted(Counter(r.name for r in sc.runtime).items()))},
        "kineto": {"file": f"{sc.stem}.kineto.json", "event_counts": kineto_counts},
        "nsys": {"file": f"{sc.stem}.nsys.sqlite", "schema_version": NSYS_SCHEMA_VERSION,
                 "row_counts": nsys_counts},
        "definitions": _DEFINITIONS,
    }


_SYNC_APIS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")

_DEFINITIONS = {
    "step_window": "[start_ns, end_ns) of ProfilerStep#N (Kineto) == NVTX 'step N' (Nsight), CPU side",
    "gpu_busy_ns": "union of kernel, memcpy and memset intervals on the device, clipped to the window",
    "kernel_busy_ns": "union of kernel intervals only, clipped to the window",
    "gpu_idle_ns": "window minus gpu_busy_ns; compute_idle_ns: window minus kernel_busy_ns",
    "idle_by_cause": "each idle ns charged to the cause label of the main-thread stretch it falls in: "
                     "data_loading (DataLoader __next__), host_device_sync (blocked in a sync API, and "
                     "CPU work that runs after a sync drained the GPU), launch_bound (issuing launches), "
                     "pageable_memcpy (blocked in a pageable cudaMemcpyAsync), cpu_work (other CPU work)",
    "expected_top_cause": "first cause by compute_idle_by_cause totals; null means no cause should be reported",
}


def _check_obvious(sc: Scenario) -> None:
    """The numbers a reader can see in the scenario description must come out of the model."""
    t, steps = sc.truth, sc.truth["per_step"]
    expected = t["expected_top_cause"]
    if expected is not None:
        assert t["cause_ranking_by_compute_idle"][0] == expected, (sc.name, t["cause_ranking_by_compute_idle"])
    for r in steps:
        cidle = r["compute_idle_by_cause"]
        if sc.name == "healthy":
            if r["step"] > 1:
                assert r["gpu_busy_ns"] == r["duration_ns"], "healthy GPU must never idle after step 1"
        elif sc.name in ("dataloader_stall", "dataloader_fixed"):
            dl = 40 * MS if sc.name == "dataloader_stall" else 2 * MS
            assert r["idle_by_cause"]["data_loading"] == dl
            assert cidle["data_loading"] == dl
            assert r["kernel_busy_ns"] == BODY_60MS.kernel_ns == 60 * MS
        elif sc.name == "host_sync":
            assert r["idle_by_cause"]["host_device_sync"] == 15 * MS + _POST_DRAIN_NS
            assert r["kernel_busy_ns"] == 60 * MS
        elif sc.name == "host_sync_fixed":
            assert r["step"] == 1 or r["gpu_busy_ns"] == r["duration_ns"]
            assert "host_device_sync" not in r["idle_by_cause"]
        elif sc.name == "launch_bound":
            assert r["kernel_busy_ns"] == r["gpu_busy_ns"] == LAUNCH_BOUND_KERNELS * 2 * US == 800 * US
            assert r["duration_ns"] == LAUNCH_BOUND_KERNELS * 10 * US == 4 * MS
            assert r["idle_by_cause"] == {"launch_bound": 3_200 * US}
        elif sc.name == "pageable_memcpy":
            pageable = [o for o in sc.gpu_ops if o.src_kind == MEM_PAGEABLE and o.kind == "memcpy"
                        and r["start_ns"] <= o.start < r["end_ns"]]
            assert [o.dur for o in pageable] == [25 * MS]
            assert pageable[0].nbytes == PAGEABLE_BYTES
            assert cidle["pageable_memcpy"] == 25 * MS + _PAGEABLE_OVERHEAD_NS
            assert r["kernel_busy_ns"] == 60 * MS
    if sc.name == "healthy":
        assert sum(o.dur for o in sc.gpu_ops) == len(steps) * 50 * MS, "50 ms of GPU work per step"
        assert t["totals"]["gpu_busy_fraction"] >= 0.97
        assert len(steps) == 8
    elif sc.name == "launch_bound":
        assert t["totals"]["gpu_busy_fraction"] == 0.2
        assert t["kernels"]["count"] == LAUNCH_BOUND_KERNELS * LAUNCH_BOUND_STEPS
    else:
        assert len(steps) == 8


def _check_multi_rank(ranks: Sequence[Scenario]) -> None:
    assert [r.rank for r in ranks] == [0, 1]
    ar = [[o for o in r.gpu_ops if o.kernel is NCCL_ALLREDUCE] for r in ranks]
    assert len(ar[0]) == len(ar[1]) == 8
    for a0, a1 in zip(ar[0], ar[1], strict=True):
        assert a0.end == a1.end, "a collective ends at the same instant on every rank"
        assert a0.dur == ALLREDUCE_COMM_NS + STRAGGLE_NS
        assert a1.dur == ALLREDUCE_COMM_NS
        assert a1.start - a0.start == STRAGGLE_NS
    assert [(s.start, s.end) for s in ranks[0].steps] == [(s.start, s.end) for s in ranks[1].steps]


# --------------------------------------------------------------------------------------------
# Kineto Chrome trace writer
# --------------------------------------------------------------------------------------------


class _Us:
    """A nanosecond time printed the way Kineto prints µs: integer part, '.', 3 digits."""

    __slots__ = ("ns",)

    def __init__(self, ns: int) -> None:
        self.ns = ns

    def __str__(self) -> str:
        return f"{self.ns // 1000}.{self.ns % 1000:03d}"


def _dump(value: Any) -> str:
    if isinstance(value, _Us):
        return str(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{_dump(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_dump(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def _device_properties(n_devices: int) -> list[dict[str, Any]]:
    return [
        {"id": i, "name": GPU_NAME, "totalGlobalMem": GPU_TOTAL_MEM, "computeMajor": 9, "computeMinor": 0,
         "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 32,
         "sharedMemPerBlock": 49152, "numSms": GPU_NUM_SMS, "regsPerMultiprocessor": 65536,
         "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472}
        for i in range(n_devices)
    ]


def _kernel_args(o: GpuOp) -> dict[str, Any]:
    k = o.kernel
    assert k is not None
    blocks = k.grid[0] * k.grid[1] * k.grid[2]
    warps_per_block = -(-(k.block[0] * k.block[1] * k.block[2]) // 32)
    args: dict[str, Any] = {}
    if o.ext_id is not None:
        args["External id"] = o.ext_id
    args.update({
        "queued": 0, "device": o.device, "context": CONTEXT, "stream": o.stream, "correlation": o.correlation,
        "registers per thread": k.registers, "shared memory": k.shared_mem,
        "blocks per SM": round(blocks / GPU_NUM_SMS, 6),
        "warps per SM": round(blocks * warps_per_block / GPU_NUM_SMS, 6),
        "grid": list(k.grid), "block": list(k.block), "est. achieved occupancy %": k.occupancy,
    })
    args.update(o.extra_args)
    return args


def _gpu_event(o: GpuOp) -> dict[str, Any]:
    cat = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}[o.kind]
    if o.kind == "kernel":
        args = _kernel_args(o)
    else:
        args = {"External id": o.ext_id} if o.ext_id is not None else {}
        args.update({"device": o.device, "context": CONTEXT, "stream": o.stream, "correlation": o.correlation,
                     "bytes": o.nbytes, "memory bandwidth (GB/s)": round(o.nbytes / o.dur, 6)})
    return {"ph": "X", "cat": cat, "name": o.name, "pid": o.device, "tid": o.stream, "ts": _Us(o.start),
            "dur": _Us(o.dur), "args": args}


def _sync_tid(s: SyncOp) -> int:
    return s.stream if s.stream is not None else -1


def _sync_event(s: SyncOp) -> dict[str, Any]:
    args: dict[str, Any] = {"External id": s.ext_id} if s.ext_id is not None else {}
    args["cuda_sync_kind"] = s.kind
    if s.kind == "Event Sync":
        args.update({"wait_on_stream": STREAM, "wait_on_cuda_event_record_corr_id": s.event_record_corr,
                     "wait_on_cuda_event_id": s.event_id})
    args.update({"stream": s.stream if s.stream is not None else -1, "correlation": s.correlation,
                 "device": s.device, "context": CONTEXT})
    return {"ph": "X", "cat": "cuda_sync", "name": s.kind, "pid": s.device, "tid": _sync_tid(s),
            "ts": _Us(s.start), "dur": _Us(s.end - s.start), "args": args}


def _flow(ph: str, corr: int, pid: int, tid: int, ts: int) -> dict[str, Any]:
    ev = {"ph": ph, "id": corr, "pid": pid, "tid": tid, "ts": _Us(ts), "cat": "ac2g", "name": "ac2g"}
    if ph == "f":
        ev["bp"] = "e"
    return ev


def _metadata_events(sc: Scenario) -> list[dict[str, Any]]:
    ts = _Us(sc.profiler_start)
    out: list[dict[str, Any]] = []

    def meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> None:
        out.append({"name": name, "ph": "M", "ts": ts, "pid": pid, "tid": tid, "args": args})

    meta("process_name", sc.pid, 0, {"name": "python3"})
    meta("process_labels", sc.pid, 0, {"labels": "CPU"})
    meta("process_sort_index", sc.pid, 0, {"sort_index": sc.pid})
    meta("process_name", sc.device, 0, {"name": "python3"})
    meta("process_labels", sc.device, 0, {"labels": f"GPU {sc.device}"})
    meta("process_sort_index", sc.device, 0, {"sort_index": 5000000 + sc.device})
    meta("thread_name", sc.pid, sc.tid, {"name": f"thread {sc.tid} (python3)"})
    meta("thread_sort_index", sc.pid, sc.tid, {"sort_index": sc.tid})
    meta("thread_name", sc.device, sc.stream, {"name": f"stream {sc.stream} "})
    meta("thread_sort_index", sc.device, sc.stream, {"sort_index": sc.stream})
    if any(s.stream is None for s in sc.syncs):
        meta("thread_name", sc.device, -1, {"name": f"Device {sc.device}"})
        meta("thread_sort_index", sc.device, -1, {"sort_index": -1})
    return out


def _distributed_info(sc: Scenario) -> dict[str, Any]:
    ranks = list(range(sc.world_size))
    return {"backend": "nccl", "rank": sc.rank, "world_size": sc.world_size, "pg_count": 1,
            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                           "pg_size": sc.world_size, "ranks": ranks}],
            "nccl_version": "2.21.5"}


def _kineto_events(sc: Scenario) -> list[dict[str, Any]]:
    """traceEvents in Kineto's order: CPU side, GPU side, metadata, then the window markers."""
    cpu: list[tuple[int, int, dict[str, Any]]] = []
    for idx, o in enumerate(sc.cpu_ops):
        args = {"External id": o.ext_id, "Record function id": 0}
        args.update(o.args)
        args["Ev Idx"] = idx
        cpu.append((o.start, 0, {"ph": "X", "cat": o.cat, "name": o.name, "pid": sc.pid, "tid": o.tid,
                                 "ts": _Us(o.start), "dur": _Us(o.end - o.start), "args": args}))
    linked = {o.correlation for o in sc.gpu_ops} | {s.correlation for s in sc.syncs}
    for r in sc.runtime:
        args = {"External id": r.ext_id} if r.ext_id is not None else {}
        args.update({"cbid": _RUNTIME_API[r.name][0], "correlation": r.correlation})
        cpu.append((r.start, 1, {"ph": "X", "cat": "cuda_runtime", "name": r.name, "pid": sc.pid, "tid": r.tid,
                                 "ts": _Us(r.start), "dur": _Us(r.end - r.start), "args": args}))
        if r.correlation in linked:
            cpu.append((r.start, 2, _flow("s", r.correlation, sc.pid, r.tid, r.start)))
    gpu: list[tuple[int, int, dict[str, Any]]] = []
    for g in sc.gpu_ops:
        gpu.append((g.start, 0, _gpu_event(g)))
        gpu.append((g.start, 1, _flow("f", g.correlation, g.device, g.stream, g.start)))
    for s in sc.syncs:
        gpu.append((s.start, 0, _sync_event(s)))
        gpu.append((s.start, 1, _flow("f", s.correlation, s.device, _sync_tid(s), s.start)))
    # Stable sorts keep the builder's order among equal keys (deterministic).
    events = [e for _t, _k, e in sorted(cpu, key=lambda x: (x[0], x[1]))]
    events += [e for _t, _k, e in sorted(gpu, key=lambda x: (x[0], x[1]))]
    events += _metadata_events(sc)
    events.append({"ph": "X", "cat": "Trace", "ts": _Us(sc.profiler_start),
                   "dur": _Us(sc.profiler_end - sc.profiler_start), "pid": "Spans", "tid": "PyTorch Profiler",
                   "name": "PyTorch Profiler (0)", "args": {"Op count": 0}})
    events.append({"name": "process_sort_index", "ph": "M", "ts": _Us(sc.profiler_start), "pid": "Spans",
                   "tid": 0, "args": {"sort_index": 536870912}})
    events.append({"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces",
                   "tid": "Trace PyTorch Profiler", "ts": _Us(sc.profiler_start)})
    events.append({"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "",
                   "ts": _Us(sc.profiler_end)})
    return events


def _event_key(ev: dict[str, Any]) -> str:
    cat = ev.get("cat")
    return f"{ev['ph']}/{cat}" if cat else str(ev["ph"])


def _kineto_event_counts(sc: Scenario) -> dict[str, int]:
    """Count of traceEvents per 'ph/cat' ('M' and 'i' have no cat)."""
    return dict(sorted(Counter(_event_key(e) for e in _kineto_events(sc)).items()))


def kineto_json(sc: Scenario) -> str:
    """The Kineto trace as text: one trace event per line, times as µs with 3 decimals."""
    trace_id = hashlib.sha1(f"tracekit-synthetic/{sc.stem}".encode()).hexdigest()[:32].upper()
    head: list[tuple[str, Any]] = [
        ("schemaVersion", 1),
        ("deviceProperties", _device_properties(sc.n_devices)),
        ("distributedInfo", _distributed_info(sc)),
        ("cuda_runtime_version", 12040),
        ("cuda_driver_version", 12090),
        ("cupti_version", 22),
        ("trace_id", trace_id),
        ("displayTimeUnit", "ms"),
        ("baseTimeNanoseconds", SESSION_EPOCH_NS),
    ]
    lines = ["{"]
    lines += [f"  {json.dumps(k)}: {_dump(v)}," for k, v in head]
    lines.append('  "traceEvents": [')
    events = _kineto_events(sc)
    lines += [f"  {_dump(e)}," for e in events[:-1]]
    lines.append(f"  {_dump(events[-1])}")
    lines.append("  ],")
    lines.append(f'  "traceName": {json.dumps(f"{sc.stem}.kineto.json")}')
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_kineto(sc: Scenario, path: str | os.PathLike[str]) -> Path:
    p = Path(path)
    p.write_text(kineto_json(sc), encoding="utf-8", newline="\n")
    return p


# --------------------------------------------------------------------------------------------
# Nsight Systems SQLite writer (export schema 3.13.2, nsys 2024.5)
# --------------------------------------------------------------------------------------------

NSYS_PRODUCT_VERSION = "2024.5.1.113"
NSYS_SCHEMA_VERSION = "3.13.2"
NVTX_DOMAIN_ID = 1
NVTX_DOMAIN_NAME = "tracekit.train"

# Column lists and types in the order nsys 2024.5 creates them. (name, declared type, constraint)
_I, _T, _R = "INTEGER", "TEXT", "REAL"
_NN, _PK = "NOT NULL", "NOT NULL   PRIMARY KEY"
_GPU_PREFIX = [("start", _I, _NN), ("end", _I, _NN), ("deviceId", _I, _NN), ("contextId", _I, _NN),
               ("greenContextId", _I, ""), ("streamId", _I, _NN), ("correlationId", _I, ""),
               ("globalPid", _I, "")]
_ENUM = [("id", _I, _PK), ("name", _T, ""), ("label", _T, "")]
_SCHEMA: dict[str, list[tuple[str, str, str]]] = {
    "StringIds": [("id", _I, _PK), ("value", _T, _NN)],
    "ThreadNames": [("nameId", _I, _NN), ("priority", _I, ""), ("globalTid", _I, "")],
    "PROCESSES": [("globalPid", _I, ""), ("pid", _I, ""), ("name", _T, "")],
    "META_DATA_EXPORT": [("name", _T, _NN), ("value", _T, "")],
    "ANALYSIS_DETAILS": [("globalVid", _I, _NN), ("duration", _I, _NN), ("startTime", _I, _NN),
                         ("stopTime", _I, _NN)],
    "TARGET_INFO_SESSION_START_TIME": [("utcEpochNs", _I, ""), ("utcTime", _T, ""), ("localTime", _T, "")],
    "TARGET_INFO_GPU": [
        ("vmId", _I, _NN), ("id", _I, _NN), ("name", _T, ""), ("busLocation", _T, ""), ("isDiscrete", _I, ""),
        ("l2CacheSize", _I, ""), ("totalMemory", _I, ""), ("memoryBandwidth", _I, ""), ("clockRate", _I, ""),
        ("smCount", _I, ""), ("pwGpuId", _I, ""), ("uuid", _T, ""), ("luid", _I, ""), ("chipName", _T, ""),
        ("cuDevice", _I, ""), ("ctxswDevPath", _T, ""), ("ctrlDevPath", _T, ""), ("revision", _I, ""),
        ("nodeMask", _I, ""), ("constantMemory", _I, ""), ("maxIPC", _I, ""), ("maxRegistersPerBlock", _I, ""),
        ("maxShmemPerBlock", _I, ""), ("maxShmemPerBlockOptin", _I, ""), ("maxShmemPerSm", _I, ""),
        ("maxRegistersPerSm", _I, ""), ("threadsPerWarp", _I, ""), ("asyncEngines", _I, ""),
        ("maxWarpsPerSm", _I, ""), ("maxBlocksPerSm", _I, ""), ("maxThreadsPerBlock", _I, ""),
        ("maxBlockDimX", _I, ""), ("maxBlockDimY", _I, ""), ("maxBlockDimZ", _I, ""), ("maxGridDimX", _I, ""),
        ("maxGridDimY", _I, ""), ("maxGridDimZ", _I, ""), ("computeMajor", _I, ""), ("computeMinor", _I, ""),
        ("smMajor", _I, ""), ("smMinor", _I, ""),
    ],
    "TARGET_INFO_CUDA_CONTEXT_INFO": [
        ("nullStreamId", _I, _NN), ("hwId", _I, _NN), ("vmId", _I, _NN), ("processId", _I, _NN),
        ("deviceId", _I, _NN), ("contextId", _I, _NN), ("parentContextId", _I, ""), ("isGreenContext", _I, ""),
    ],
    "TARGET_INFO_CUDA_STREAM": [
        ("streamId", _I, _NN), ("hwId", _I, _NN), ("vmId", _I, _NN), ("processId", _I, _NN),
        ("contextId", _I, _NN), ("priority", _I, _NN), ("flag", _I, _NN),
    ],
    "ENUM_CUDA_MEMCPY_OPER": _ENUM,
    "ENUM_CUDA_MEM_KIND": _ENUM,
    "ENUM_CUPTI_SYNC_TYPE": _ENUM,
    "ENUM_CUDA_KERNEL_LAUNCH_TYPE": _ENUM,
    "ENUM_CUDA_FUNC_CACHE_CONFIG": _ENUM,
    "ENUM_CUDA_SHARED_MEM_LIMIT_CONFIG": _ENUM,
    "ENUM_CUPTI_STREAM_TYPE": _ENUM,
    "ENUM_NSYS_EVENT_TYPE": _ENUM,
    "ENUM_NSYS_EVENT_CLASS": _ENUM,
    "CUPTI_ACTIVITY_KIND_KERNEL": [
        *_GPU_PREFIX,
        ("demangledName", _I, _NN), ("shortName", _I, _NN), ("mangledName", _I, ""), ("launchType", _I, ""),
        ("cacheConfig", _I, ""), ("registersPerThread", _I, _NN), ("gridX", _I, _NN), ("gridY", _I, _NN),
        ("gridZ", _I, _NN), ("blockX", _I, _NN), ("blockY", _I, _NN), ("blockZ", _I, _NN),
        ("staticSharedMemory", _I, _NN), ("dynamicSharedMemory", _I, _NN), ("localMemoryPerThread", _I, _NN),
        ("localMemoryTotal", _I, _NN), ("gridId", _I, _NN), ("sharedMemoryExecuted", _I, ""),
        ("graphNodeId", _I, ""), ("sharedMemoryLimitConfig", _I, ""),
    ],
    "CUPTI_ACTIVITY_KIND_MEMCPY": [
        *_GPU_PREFIX,
        ("bytes", _I, _NN), ("copyKind", _I, _NN), ("deprecatedSrcId", _I, ""), ("srcKind", _I, ""),
        ("dstKind", _I, ""), ("srcDeviceId", _I, ""), ("srcContextId", _I, ""), ("dstDeviceId", _I, ""),
        ("dstContextId", _I, ""), ("migrationCause", _I, ""), ("graphNodeId", _I, ""), ("virtualAddress", _I, ""),
    ],
    "CUPTI_ACTIVITY_KIND_MEMSET": [
        *_GPU_PREFIX,
        ("value", _I, _NN), ("bytes", _I, _NN), ("graphNodeId", _I, ""), ("memKind", _I, ""),
    ],
    "CUPTI_ACTIVITY_KIND_RUNTIME": [
        ("start", _I, _NN), ("end", _I, _NN), ("eventClass", _I, _NN), ("globalTid", _I, ""),
        ("correlationId", _I, ""), ("nameId", _I, _NN), ("returnValue", _I, _NN), ("callchainId", _I, ""),
    ],
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": [*_GPU_PREFIX, ("syncType", _I, _NN), ("eventId", _I, _NN)],
    "NVTX_EVENTS": [
        ("start", _I, _NN), ("end", _I, ""), ("eventType", _I, _NN), ("rangeId", _I, ""), ("category", _I, ""),
        ("color", _I, ""), ("text", _T, ""), ("globalTid", _I, ""), ("endGlobalTid", _I, ""), ("textId", _I, ""),
        ("domainId", _I, ""), ("uint64Value", _I, ""), ("int64Value", _I, ""), ("doubleValue", _R, ""),
        ("uint32Value", _I, ""), ("int32Value", _I, ""), ("floatValue", _R, ""), ("jsonTextId", _I, ""),
        ("jsonText", _T, ""),
    ],
}

#: Tables nsys writes even when empty-ish (lookup, target and metadata tables). Event tables are
#: created lazily, only when they have rows, as ``nsys export --lazy=true`` (the default) does.
_ALWAYS = (
    "StringIds", "ThreadNames", "PROCESSES", "META_DATA_EXPORT", "ANALYSIS_DETAILS",
    "TARGET_INFO_SESSION_START_TIME", "TARGET_INFO_GPU", "TARGET_INFO_CUDA_CONTEXT_INFO",
    "TARGET_INFO_CUDA_STREAM", *(t for t in _SCHEMA if t.startswith("ENUM_")),
)

_ENUM_ROWS: dict[str, list[tuple[int, str, str]]] = {
    "ENUM_CUDA_MEMCPY_OPER": [
        (0, "CUDA_MEMCPY_KIND_UNKNOWN", "Unknown"), (1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"),
        (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host"), (3, "CUDA_MEMCPY_KIND_HTOA", "Host-to-Array"),
        (4, "CUDA_MEMCPY_KIND_ATOH", "Array-to-Host"), (5, "CUDA_MEMCPY_KIND_ATOA", "Array-to-Array"),
        (6, "CUDA_MEMCPY_KIND_ATOD", "Array-to-Device"), (7, "CUDA_MEMCPY_KIND_DTOA", "Device-to-Array"),
        (8, "CUDA_MEMCPY_KIND_DTOD", "Device-to-Device"), (9, "CUDA_MEMCPY_KIND_HTOH", "Host-to-Host"),
        (10, "CUDA_MEMCPY_KIND_PTOP", "Peer-to-Peer"), (11, "CUDA_MEMCPY_KIND_UVM_HTOD", "Unified Host-to-Device"),
        (12, "CUDA_MEMCPY_KIND_UVM_DTOH", "Unified Device-to-Host"),
        (13, "CUDA_MEMCPY_KIND_UVM_DTOD", "Unified Device-to-Device"),
    ],
    "ENUM_CUDA_MEM_KIND": [
        (0, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"), (1, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"),
        (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device"), (3, "CUDA_MEMOPR_MEMORY_KIND_ARRAY", "Array"),
        (4, "CUDA_MEMOPR_MEMORY_KIND_MANAGED", "Managed"),
        (5, "CUDA_MEMOPR_MEMORY_KIND_DEVICE_STATIC", "Device Static"),
        (6, "CUDA_MEMOPR_MEMORY_KIND_MANAGED_STATIC", "Managed Static"),
        (7, "CUDA_MEMOPR_MEMORY_KIND_UNKNOWN", "Unknown"),
    ],
    "ENUM_CUPTI_SYNC_TYPE": [
        (0, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_UNKNOWN", "Unknown"),
        (1, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE", "Event sync"),
        (2, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT", "Stream wait sync"),
        (3, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE", "Stream sync"),
        (4, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE", "Context sync"),
    ],
    "ENUM_CUDA_KERNEL_LAUNCH_TYPE": [
        (0, "CUDA_KERNEL_LAUNCH_TYPE_UNKNOWN", "Unknown"), (1, "CUDA_KERNEL_LAUNCH_TYPE_REGULAR", "Regular"),
        (2, "CUDA_KERNEL_LAUNCH_TYPE_COOPERATIVE_SINGLE_DEVICE", "Coop Single Device"),
        (3, "CUDA_KERNEL_LAUNCH_TYPE_COOPERATIVE_MULTI_DEVICE", "Coop Multi Device"),
    ],
    "ENUM_CUDA_FUNC_CACHE_CONFIG": [
        (0, "CU_FUNC_CACHE_PREFER_NONE", "None"), (1, "CU_FUNC_CACHE_PREFER_SHARED", "Shared"),
        (2, "CU_FUNC_CACHE_PREFER_L1", "L1"), (3, "CU_FUNC_CACHE_PREFER_EQUAL", "Equal"),
    ],
    "ENUM_CUDA_SHARED_MEM_LIMIT_CONFIG": [
        (0, "CUDA_SHARED_MEM_LIMIT_DEFAULT", "Default"), (1, "CUDA_SHARED_MEM_LIMIT_OPTIN", "Opt in"),
    ],
    "ENUM_CUPTI_STREAM_TYPE": [
        (0, "CUPTI_ACTIVITY_STREAM_CREATE_FLAG_UNKNOWN", "Unknown stream type"),
        (1, "CUPTI_ACTIVITY_STREAM_CREATE_FLAG_DEFAULT", "Default stream"),
        (2, "CUPTI_ACTIVITY_STREAM_CREATE_FLAG_NON_BLOCKING", "Non-blocking stream"),
        (3, "CUPTI_ACTIVITY_STREAM_CREATE_FLAG_NULL", "Null stream"),
    ],
    # Only the NVTX part of the (much longer) real enum.
    "ENUM_NSYS_EVENT_TYPE": [
        (33, "NvtxCategory", "NvtxCategory"), (34, "NvtxMark", "NvtxMark"), (35, "NvtxPushRange", "NvtxPushRange"),
        (36, "NvtxPopRange", "NvtxPopRange"), (37, "NvtxStartRange", "NvtxStartRange"),
        (38, "NvtxEndRange", "NvtxEndRange"), (39, "NvtxThread", "NvtxThread"),
        (59, "NvtxPushPopRange", "NvtxPushPopRange"), (60, "NvtxStartEndRange", "NvtxStartEndRange"),
        (75, "NvtxDomainCreate", "NvtxDomainCreate"), (76, "NvtxDomainDestroy", "NvtxDomainDestroy"),
    ],
    # Only the classes a CUDA + NVTX capture can produce in the RUNTIME table and neighbours.
    "ENUM_NSYS_EVENT_CLASS": [
        (0, "TRACE_PROCESS_EVENT_CUDA_RUNTIME", "CUDA runtime"), (1, "TRACE_PROCESS_EVENT_CUDA_DRIVER", "CUDA driver"),
        (27, "TRACE_PROCESS_EVENT_OS_RUNTIME", "OSRT runtime"), (28, "TRACE_PROCESS_EVENT_CUDNN", "cuDNN"),
        (29, "TRACE_PROCESS_EVENT_CUBLAS", "cuBLAS"), (67, "TRACE_PROCESS_EVENT_CUDABACKTRACE", "CUDA backtrace"),
        (77, "TRACE_PROCESS_EVENT_CUDA_GRAPH_NODE_CREATION", "CUDA graph node creation"),
    ],
}


def global_tid(pid: int, tid: int) -> int:
    """nsys serialized thread id: hw:8 | vm:8 | pid:24 | tid:24, here with hw = vm = 0."""
    return (pid << 24) | tid


def global_pid(pid: int) -> int:
    return pid << 24


class _Strings:
    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, value: str) -> int:
        if value not in self.ids:
            self.ids[value] = len(self.ids)
        return self.ids[value]


def _utc(ns: int) -> str:
    dt = datetime.datetime.fromtimestamp(ns // 1_000_000_000, tz=datetime.timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S")


def _gpu_row(sc: Scenario, dev: int) -> tuple[Any, ...]:
    uuid = f"8f1c2d3e-4a5b-6c7d-8e9f-{dev:012x}"
    return (0, dev, GPU_NAME, f"0000:{0x18 + 0x20 * dev:02x}:00.0", 1, 52_428_800, GPU_TOTAL_MEM,
            3_352_320_000_000, 1_980_000_000, GPU_NUM_SMS, dev, uuid, 0, "GH100", dev, "", "", 161, 0, 65_536, 4,
            65_536, 49_152, 232_448, 233_472, 65_536, 32, 3, 64, 32, 1024, 1024, 1024, 64, 2_147_483_647, 65_535,
            65_535, 9, 0, 9, 0)


def nsys_rows(sc: Scenario) -> dict[str, tuple[list[str], list[tuple[Any, ...]]]]:
    """Every table of the Nsight export as (column names, rows), in creation order.

    Event tables with no rows are left out (lazy export)."""
    s = _Strings()
    for fixed in ("[Unknown]", "[NSys]", "[NSys Comms]", "CUPTI worker thread", "pt_main_thread"):
        s(fixed)
    gpid = global_pid(sc.pid)
    main = global_tid(sc.pid, sc.tid)
    tables: dict[str, list[tuple[Any, ...]]] = {t: [] for t in _SCHEMA}

    tables["ThreadNames"] = [
        (s("pt_main_thread"), 20, main),
        (s("[NSys]"), 10, global_tid(sc.pid, sc.tid + 3)),
        (s("[NSys Comms]"), 10, global_tid(sc.pid, sc.tid + 4)),
        (s("CUPTI worker thread"), 10, global_tid(sc.pid, sc.tid + 9)),
    ]
    tables["PROCESSES"] = [(gpid, sc.pid, "python3")]
    tables["TARGET_INFO_GPU"] = [_gpu_row(sc, d) for d in range(sc.n_devices)]
    tables["TARGET_INFO_CUDA_CONTEXT_INFO"] = [(sc.stream, 0, 0, sc.pid, sc.device, CONTEXT, None, None)]
    tables["TARGET_INFO_CUDA_STREAM"] = [(sc.stream, 0, 0, sc.pid, CONTEXT, 0, 3)]
    tables["TARGET_INFO_SESSION_START_TIME"] = [(SESSION_EPOCH_NS, _utc(SESSION_EPOCH_NS), _utc(SESSION_EPOCH_NS))]
    tables["ANALYSIS_DETAILS"] = [(0, sc.profiler_end, 0, sc.profiler_end)]
    for table, rows in _ENUM_ROWS.items():
        tables[table] = list(rows)

    # Runtime calls in start order, then GPU activity; names go into StringIds as first met.
    for r in sorted(sc.runtime, key=lambda r: (r.start, r.correlation)):
        tables["CUPTI_ACTIVITY_KIND_RUNTIME"].append(
            (r.start, r.end, 0, global_tid(sc.pid, r.tid), r.correlation, s(_RUNTIME_API[r.name][1]), 0, None))
    grid_id = 0
    for o in sorted(sc.gpu_ops, key=lambda o: (o.start, o.correlation)):
        prefix = (o.start, o.end, o.device, CONTEXT, None, o.stream, o.correlation, gpid)
        if o.kind == "kernel":
            k = o.kernel
            assert k is not None
            grid_id += 1
            # Above 48 KiB a kernel needs opt-in dynamic shared memory; the driver reserves whole 8 KiB units.
            optin = k.shared_mem > 48 * 1024
            static = 0 if optin else k.shared_mem
            executed = max(8192, -(-k.shared_mem // 8192) * 8192)
            tables["CUPTI_ACTIVITY_KIND_KERNEL"].append((
                *prefix, s(k.name), s(k.short), None, 1, 0, k.registers, *k.grid, *k.block, static, k.shared_mem - static,
                0, 0, grid_id, executed, None, 1 if optin else 0))
        elif o.kind == "memcpy":
            tables["CUPTI_ACTIVITY_KIND_MEMCPY"].append((
                *prefix, o.nbytes, o.copy_kind, None, o.src_kind, o.dst_kind, None, None, None, None, None, None, None))
        else:
            tables["CUPTI_ACTIVITY_KIND_MEMSET"].append((*prefix, 0, o.nbytes, None, o.dst_kind))
    for y in sorted(sc.syncs, key=lambda y: (y.start, y.correlation)):
        stream = y.stream if y.stream is not None else SENTINEL_U32
        event = y.event_id if y.event_id is not None else SENTINEL_U32
        tables["CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"].append(
            (y.start, y.end, y.device, CONTEXT, None, stream, y.correlation, gpid, SYNC_TYPE[y.kind], event))

    # NVTX: a domain-create row, then push/pop ranges whose messages are registered strings.
    nvtx = tables["NVTX_EVENTS"]
    nvtx.append((sc.profiler_start, None, 75, None, None, None, NVTX_DOMAIN_NAME, main, None, None,
                 NVTX_DOMAIN_ID, None, None, None, None, None, None, None, None))
    for rng in sc.nvtx:
        nvtx.append((rng.start, rng.end, 59, None, None, None, None, global_tid(sc.pid, rng.tid), None, s(rng.text),
                     NVTX_DOMAIN_ID, None, None, None, None, None, None, None, None))

    stem = f"{sc.stem}.nsys"
    tables["META_DATA_EXPORT"] = [
        ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"), ("EXPORT_PRODUCT_VERSION", NSYS_PRODUCT_VERSION),
        ("EXPORT_PRODUCT_DATE", "2024.5"), ("EXPORT_SCHEMA_VERSION", NSYS_SCHEMA_VERSION),
        ("EXPORT_SCHEMA_VERSION_MAJOR", "3"), ("EXPORT_SCHEMA_VERSION_MINOR", "13"),
        ("EXPORT_SCHEMA_VERSION_MICRO", "2"), ("EXPORT_PLATFORM", "linux-desktop"), ("EXPORT_ARCH", "x64"),
        ("EXPORT_TIME_UTC", _utc(SESSION_EPOCH_NS)), ("EXPORT_HOST", "tracekit-synthetic"),
        ("EXPORT_USER", "tracekit"), ("EXPORT_PARAM_INPUT_FILE", f"{stem}-rep"),
        ("EXPORT_PARAM_OUTPUT_FILE", f"{stem}.sqlite"), ("EXPORT_PARAM_LAZY", "true"),
        ("EXPORT_PARAM_TIME_NORMALIZE", "false"), ("EXPORT_PARAM_TIME_SHIFT", "0"),
        ("DERIVED_BY", "tracekit scripts/synthetic.py (synthetic, not a capture)"),
    ]
    tables["StringIds"] = [(i, v) for v, i in s.ids.items()]

    out: dict[str, tuple[list[str], list[tuple[Any, ...]]]] = {}
    for table, cols in _SCHEMA.items():
        rows = tables[table]
        if rows or table in _ALWAYS:
            out[table] = ([c[0] for c in cols], rows)
    return out


def _ddl(table: str) -> str:
    cols = _SCHEMA[table]
    body = ",\n".join(f"    {name:<28}{typ:<10}{cons}".rstrip() for name, typ, cons in cols)
    return f"CREATE TABLE {table} (\n{body}\n)"


def write_nsys(sc: Scenario, path: str | os.PathLike[str]) -> Path:
    """Write the SQLite export; deterministic (fixed page size, ordered inserts, VACUUM)."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    for f in (tmp, Path(str(tmp) + "-journal")):
        f.unlink(missing_ok=True)
    con = sqlite3.connect(tmp)
    try:
        con.execute("PRAGMA page_size = 4096")
        con.execute("PRAGMA journal_mode = DELETE")
        with con:
            for table, (cols, rows) in nsys_rows(sc).items():
                con.execute(_ddl(table))
                if rows:
                    marks = ", ".join("?" * len(cols))
                    con.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
        con.execute("VACUUM")
    finally:
        con.close()
    os.replace(tmp, p)
    return p


# --------------------------------------------------------------------------------------------
# Expected files, CLI
# --------------------------------------------------------------------------------------------


def expected_json(sc: Scenario) -> str:
    return json.dumps(sc.truth, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_expected(sc: Scenario, path: str | os.PathLike[str]) -> Path:
    p = Path(path)
    p.write_text(expected_json(sc), encoding="utf-8", newline="\n")
    return p


def write_all(out_dir: str | os.PathLike[str]) -> list[Path]:
    """Write every scenario's three files into ``out_dir``; returns the paths in a fixed order."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for sc in build_all():
        paths.append(write_kineto(sc, out / f"{sc.stem}.kineto.json"))
        paths.append(write_nsys(sc, out / f"{sc.stem}.nsys.sqlite"))
        paths.append(write_expected(sc, out / f"{sc.stem}.expected.json"))
    return paths


def _default_out() -> Path:
    return Path(__file__).resolve().parent.parent / "sample_traces" / "synthetic"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--out", type=Path, default=_default_out(),
                    help="directory the files are written into (default: sample_traces/synthetic)")
    ap.add_argument("--check", action="store_true",
                    help="regenerate into a temporary directory and exit 1 if --out differs")
    ns = ap.parse_args(argv)
    if ns.check:
        with tempfile.TemporaryDirectory() as tmp:
            fresh = write_all(tmp)
            stale = [f.name for f in fresh
                     if not (ns.out / f.name).is_file() or not filecmp.cmp(f, ns.out / f.name, shallow=False)]
        for name in stale:
            print(f"stale: {ns.out / name}", file=sys.stderr)
        return 1 if stale else 0
    for path in write_all(ns.out):
        print(f"{path}  {path.stat().st_size:>9,d} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
