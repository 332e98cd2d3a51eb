"""The event model of the synthetic world: fixed parameters, the events a training loop emits,
the builder that lays them out on one CPU thread driving one CUDA stream, and step building blocks.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

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
CAUSES = ("data_loading", "host_device_sync", "launch_bound", "pageable_memcpy", "cpu_bound")

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
RUNTIME_API = {
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
class EventHandle:
    event_id: int
    record_corr: int
    done_at: int  # GPU time the event completes


class Builder:
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
                       event: EventHandle | None = None) -> SyncOp:
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

    def event_record(self) -> EventHandle:
        self.advance(LEAD_NS)
        t = self.now
        corr = self._call("cudaEventRecord", t, t + 2_000)
        self._event += 1
        self.advance(2_000)
        return EventHandle(self._event, corr, self.tail)

    def event_sync(self, ev: EventHandle) -> SyncOp:
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


def launch_body(b: Builder, body: Body, *, allreduce: tuple[int, int] | None = None,
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


def item_sync(b: Builder) -> SyncOp:
    """``loss.item()``: a 4-byte DtoH copy into pinned memory, then cudaStreamSynchronize."""
    with b.op("aten::item"), b.op("aten::_local_scalar_dense"):
        b.memcpy(4, 1_500, copy_kind=COPY_DTOH, src=MEM_DEVICE, dst=MEM_PINNED, blocking=False)
        return b.stream_sync()


def finish(b: Builder) -> None:
    """After the last step: ``torch.cuda.synchronize()`` before the profiler stops."""
    with b.cause("cpu_bound"):
        b.advance(20 * US)
        b.device_sync()
        b.advance(20 * US)
