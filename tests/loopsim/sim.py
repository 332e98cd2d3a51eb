"""Discrete-event simulation of a PyTorch training loop under CUDA semantics.

What is modelled (one host thread driving one CUDA stream):

* **Program order.**  The host runs the loop body op by op; each op costs its dispatch time
  on the host, Python between ops is untraced host time.
* **Asynchronous launches into a bounded queue.**  ``cudaLaunchKernel`` returns after its own
  cost; the kernel starts when it reached the GPU (launch latency) and the stream is free
  (FIFO, a small inter-kernel gap).  At most :data:`QUEUE_DEPTH` launched activities may wait
  to start; a launch beyond that blocks the host until the oldest one starts.
* **Syncs.**  ``.item()`` (a device→host copy then ``cudaStreamSynchronize``) and
  ``cudaStreamSynchronize`` block the host until the stream drained, plus a wake-up.
* **Copies.**  A host→device copy from pageable memory waits for the stream, runs at pageable
  bandwidth and blocks the host until it finished; from pinned memory with
  ``non_blocking=True`` it is an ordinary asynchronous launch at pinned bandwidth.  Pinning
  costs a host copy at memory bandwidth on the main thread when the loader has no workers
  (with workers a pin thread does it off the main thread).
* **DataLoader.**  ``num_workers=0``: the main thread builds the batch inside ``__next__``.
  ``num_workers=N``: N worker processes prefetch (``prefetch_factor`` batches each) from the
  moment the iterator is created; ``__next__`` waits for the batch, then pays a hand-off.
* **Allocator.**  ``cudaMalloc``/``cudaFree`` calls cost host time (the caching allocator's
  steady state has none).
* **Kernel durations** under fp32, TF32 or AMP: TF32 runs GEMMs on tensor cores
  (÷ :data:`TF32_GEMM`); AMP too (÷ :data:`AMP_GEMM`), elementwise kernels on half the bytes
  (÷ :data:`AMP_ELEMENTWISE`) and adds a cast kernel per layer.  These are the simulator's own
  assumptions, deliberately not the replay's factor.
* **Warm-up.**  The first step may carry one-time costs (library init, a ``cudaMalloc`` burst).

The step time is measured the way a user experiences throughput: step ``k`` ends when the
host starts step ``k + 1`` and the GPU finished the work step ``k`` launched, whichever is
later; the steady-state step time is the median over every step but the first.
"""

from __future__ import annotations

import dataclasses
import itertools
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: launched activities that may wait to start before a launch blocks (CUDA's launch queue)
QUEUE_DEPTH = 1024
#: a launch reaches the GPU this long after its call returned
LAUNCH_LATENCY_NS = 4_000
#: gap between consecutive activities on a busy stream
STREAM_GAP_NS = 1_500
#: the host resumes this long after the stream it waited on drained
WAKE_NS = 8_000
#: AMP's speed-ups in this simulator (tensor-core GEMMs; elementwise kernels move half the bytes)
AMP_GEMM = 3.0
AMP_ELEMENTWISE = 1.6
#: TF32's speed-up of fp32 GEMMs (tensor cores, fp32 in and out; elementwise kernels unchanged)
TF32_GEMM = 2.7

FP32_GEMM = "volta_sgemm_128x64_nn"
TF32_GEMM_NAME = "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_stage3_warpsize2x2x1_tensor16x8x8_kernel"
AMP_GEMM_NAME = "sm80_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&)::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&)::{lambda(float)#1}, at::detail::Array<char*, 2>)"
CAST = "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(float)#1}>(int, ...)"
OPT_KERNEL = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<3>, at::native::(anonymous namespace)::FusedSgdMathFunctor<float, 3> >(...)"


@dataclass(frozen=True)
class Loop:
    """One training loop (all times in ns, sizes in bytes, bandwidths in bytes per ns = GB/s)."""

    name: str
    steps: int = 10
    layers: int = 8
    #: elementwise kernels per layer in the forward pass (the backward runs twice as many)
    elementwise_per_layer: int = 2
    gemm_ns: int = 1_000_000
    elementwise_ns: int = 200_000
    amp: bool = False
    #: TF32 matmuls (torch.backends.cuda.matmul.allow_tf32 = True)
    tf32: bool = False
    #: host cost of an operator around its launch, and of the launch call itself
    dispatch_ns: int = 20_000
    launch_ns: int = 7_000
    #: untraced Python between operators
    python_ns: int = 4_000
    #: building a batch on the host (main thread with 0 workers, a worker otherwise)
    load_ns: int = 0
    num_workers: int = 0
    prefetch_factor: int = 2
    #: __next__'s cost when the batch is ready (queue get, unpickling)
    handoff_ns: int = 60_000
    batch_bytes: int = 32 << 20
    pinned: bool = False
    non_blocking: bool = False
    pageable_bw: float = 10.0
    pinned_bw: float = 22.0
    memory_bw: float = 9.0
    #: .item() after every layer of the forward pass
    item_per_layer: bool = False
    #: at the end of the step: "item" (loss.item()), "stream_sync" (cudaStreamSynchronize) or None
    step_sync: str | None = None
    #: untraced host work after the sync (logging, metrics)
    host_tail_ns: int = 0
    #: cudaMalloc/cudaFree pairs per step and the cost of each call
    mallocs_per_step: int = 0
    malloc_ns: int = 150_000
    #: one-time costs in the first step: library init and a cudaMalloc burst
    warmup_ns: int = 0
    optimizer_kernels: int = 4
    optimizer_ns: int = 150_000
    #: whether the trace records cuda_sync rows (torch >= 2.1 with enable_cuda_sync_events)
    sync_rows: bool = True
    #: an intermittent loader stall: every ``stall_every``-th batch takes ``stall_ns`` longer to build
    stall_every: int = 0
    stall_ns: int = 0
    #: GC-like pauses: untraced host time at the start of every ``gc_every``-th step
    gc_every: int = 0
    gc_ns: int = 0


@dataclass
class HostEv:
    cat: str
    name: str
    start: int
    end: int
    correlation: int | None = None
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class GpuEv:
    cat: str
    name: str
    start: int
    end: int
    correlation: int
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class SyncEv:
    start: int
    end: int
    correlation: int


@dataclass
class Run:
    """A simulated loop: its events and its step times."""

    loop: Loop
    host: list[HostEv]
    gpu: list[GpuEv]
    syncs: list[SyncEv]
    #: per step: when the host started it, and when the GPU finished the work it launched
    step_starts: list[int]
    gpu_done: list[int]
    host_end: int

    @property
    def step_ns(self) -> list[int]:
        bounds = [self.step_starts[0]]
        for k in range(len(self.step_starts)):
            nxt = self.step_starts[k + 1] if k + 1 < len(self.step_starts) else self.host_end
            bounds.append(max(nxt, self.gpu_done[k], bounds[-1]))
        return [b - a for a, b in itertools.pairwise(bounds)]

    @property
    def steady_step_ns(self) -> float:
        """Median step time over every step but the first (warm-up)."""
        return float(statistics.median(self.step_ns[1:]))

    @property
    def mean_steady_step_ns(self) -> float:
        """Mean step time over every step but the first: what a stall in only some steps costs."""
        return float(statistics.fmean(self.step_ns[1:]))


class _Sim:
    def __init__(self, loop: Loop) -> None:
        self.loop = loop
        self.t = 1_000_000
        self.gpu_free = 0
        self.starts: list[int] = []
        self.corr = 0
        self.host: list[HostEv] = []
        self.gpu: list[GpuEv] = []
        self.syncs: list[SyncEv] = []
        self.step_last_gpu = 0
        # DataLoader workers: when each batch is ready, and when the main thread took it
        self.ready: list[int] = []
        self.taken: list[int] = []
        self.worker_free = [self.t] * max(loop.num_workers, 1)

    # ------------------------------------------------------------------ host primitives
    def rng(self, cat: str, name: str, body: Callable[[], None], **args: Any) -> None:
        ev = HostEv(cat, name, self.t, self.t, args=dict(args))
        self.host.append(ev)
        body()
        ev.end = self.t

    def op(self, name: str, body: Callable[[], None] | None = None) -> None:
        """An operator: half its dispatch cost before what it does, half after."""
        half = self.loop.dispatch_ns // 2

        def run() -> None:
            self.t += half
            if body is not None:
                body()
            self.t += self.loop.dispatch_ns - half

        self.rng("cpu_op", name, run)
        self.t += self.loop.python_ns

    def api(self, name: str, cost: int, *, until: int | None = None, correlation: int | None = None) -> HostEv:
        start = self.t
        end = start + cost if until is None else max(start + cost, until)
        ev = HostEv("cuda_runtime", name, start, end, correlation=correlation)
        self.host.append(ev)
        self.t = end
        return ev

    def _queue_wait(self) -> int:
        """The time the host may issue the next launch (the launch queue holds QUEUE_DEPTH)."""
        if len(self.starts) >= QUEUE_DEPTH:
            return self.starts[-QUEUE_DEPTH]
        return 0

    def launch(self, cat: str, name: str, dur: int, *, api: str = "cudaLaunchKernel", blocking: bool = False, **args: Any) -> GpuEv:
        self.corr += 1
        corr = self.corr
        call_start = self.t
        issue = max(call_start + self.loop.launch_ns, self._queue_wait())
        start = max(issue + LAUNCH_LATENCY_NS, self.gpu_free + STREAM_GAP_NS)
        end = start + max(dur, 1_000)
        self.gpu_free = end
        self.starts.append(start)
        self.step_last_gpu = max(self.step_last_gpu, end)
        g = GpuEv(cat, name, start, end, corr, args=dict(args))
        self.gpu.append(g)
        self.api(api, issue - call_start, until=(end + WAKE_NS // 4) if blocking else None, correlation=corr)
        return g

    def stream_sync(self) -> None:
        self.corr += 1
        ev = self.api("cudaStreamSynchronize", 3_000, until=self.gpu_free + WAKE_NS, correlation=self.corr)
        if self.loop.sync_rows:
            self.syncs.append(SyncEv(ev.start, ev.end, self.corr))

    def item(self) -> None:
        def local() -> None:
            self.launch("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 2_000, api="cudaMemcpyAsync", bytes=4)
            self.stream_sync()

        self.op("aten::item", lambda: self.rng("cpu_op", "aten::_local_scalar_dense", local))

    # ------------------------------------------------------------------ the loop
    def next_batch(self, b: int) -> None:
        loop = self.loop
        if loop.num_workers == 0:
            def load() -> None:
                self.t += self._load_ns(b)
                if loop.pinned:
                    self.rng("cpu_op", "aten::pin_memory", lambda: self._advance(int(loop.batch_bytes / loop.memory_bw)))

            self.rng("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", load)
            return
        while len(self.ready) <= b:
            self._produce(len(self.ready))

        def wait() -> None:
            self.t = max(self.t, self.ready[b]) + loop.handoff_ns
            self.taken.append(self.t)

        self.rng("user_annotation", "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", wait)

    def _produce(self, b: int) -> None:
        loop = self.loop
        w = b % loop.num_workers
        # a worker may run at most prefetch_factor batches ahead of what the main thread took
        slot = b - loop.num_workers * loop.prefetch_factor
        free = self.taken[slot] if slot >= 0 and slot < len(self.taken) else self.worker_free[w]
        start = max(self.worker_free[w], free)
        self.worker_free[w] = start + self._load_ns(b)
        self.ready.append(self.worker_free[w])

    def _load_ns(self, b: int) -> int:
        """Building batch ``b`` (every ``stall_every``-th batch stalls)."""
        loop = self.loop
        stalls = loop.stall_every > 0 and b % loop.stall_every == loop.stall_every - 1
        return loop.load_ns + (loop.stall_ns if stalls else 0)

    def _advance(self, ns: int) -> None:
        self.t += ns

    def copy_in(self) -> None:
        loop = self.loop
        pinned = loop.pinned and loop.non_blocking
        bw = loop.pinned_bw if loop.pinned else loop.pageable_bw
        src = "Pinned" if loop.pinned else "Pageable"
        dur = int(loop.batch_bytes / bw)

        def copy() -> None:
            self.launch("gpu_memcpy", f"Memcpy HtoD ({src} -> Device)", dur, api="cudaMemcpyAsync", blocking=not pinned, bytes=loop.batch_bytes)

        self.op("aten::to", lambda: self.rng("cpu_op", "aten::copy_", copy))

    def kernel_op(self, name: str, kernel: str, dur: int) -> None:
        self.op(name, lambda: self.launch("kernel", kernel, dur))

    def layer(self, backward: bool) -> None:
        loop = self.loop
        amp = loop.amp
        gemm = (FP32_GEMM, loop.gemm_ns)
        if amp:
            gemm = (AMP_GEMM_NAME, int(loop.gemm_ns / AMP_GEMM))
        elif loop.tf32:
            gemm = (TF32_GEMM_NAME, int(loop.gemm_ns / TF32_GEMM))
        ew = int(loop.elementwise_ns / AMP_ELEMENTWISE) if amp else loop.elementwise_ns
        if amp and not backward:
            self.kernel_op("aten::_to_copy", CAST, max(ew // 4, 2_000))
        for _ in range(2 if backward else 1):
            self.kernel_op("aten::mm", gemm[0], gemm[1])
        for _ in range(loop.elementwise_per_layer * (2 if backward else 1)):
            self.kernel_op("aten::gelu", ELEMENTWISE, ew)

    def warmup(self) -> None:
        loop = self.loop

        def burst() -> None:
            for _ in range(8):
                self.api("cudaMalloc", loop.warmup_ns // 16)
            self.api("cudaFree", loop.warmup_ns // 2)

        self.op("aten::empty", burst)

    def forward(self, k: int) -> None:
        """The step up to its backward pass: the next batch, its copy, warm-up (step 0), the forward layers."""
        loop = self.loop
        if loop.gc_every and k % loop.gc_every == loop.gc_every - 1:
            self.t += loop.gc_ns  # a collector pause: untraced host time
        self.next_batch(k)
        self.copy_in()
        if k == 0 and loop.warmup_ns:
            self.warmup()
        for _ in range(loop.layers):
            self.layer(backward=False)
            if loop.item_per_layer:
                self.item()

    def step_tail(self) -> None:
        """The step after its backward pass: the optimizer, the step's sync, the host's tail."""
        loop = self.loop

        def optimizer() -> None:
            for _ in range(loop.optimizer_kernels):
                self.kernel_op("aten::_fused_sgd_", OPT_KERNEL, loop.optimizer_ns)

        self.rng("user_annotation", "Optimizer.step#SGD.step", optimizer)
        if loop.step_sync == "item":
            self.item()
        elif loop.step_sync == "stream_sync":
            self.stream_sync()
        self.t += loop.host_tail_ns

    def step(self, k: int) -> None:
        loop = self.loop

        def body() -> None:
            self.forward(k)
            for _ in range(loop.mallocs_per_step):
                self.op("aten::empty", lambda: (self.api("cudaMalloc", loop.malloc_ns), None)[1])
            for _ in range(loop.layers):
                self.layer(backward=True)
            for _ in range(loop.mallocs_per_step):
                self.op("aten::record_stream", lambda: (self.api("cudaFree", loop.malloc_ns), None)[1])
            self.step_tail()

        self.rng("user_annotation", f"ProfilerStep#{k + 1}", body)


def simulate(loop: Loop) -> Run:
    """Run ``loop`` for ``loop.steps`` steps."""
    sim = _Sim(loop)
    starts: list[int] = []
    done: list[int] = []
    for k in range(loop.steps):
        starts.append(sim.t)
        sim.step_last_gpu = 0
        sim.step(k)
        done.append(sim.step_last_gpu)
    return Run(loop=loop, host=sim.host, gpu=sim.gpu, syncs=sim.syncs, step_starts=starts, gpu_done=done, host_end=sim.t)


# --------------------------------------------------------------------------------------------
# fixes: how each finding's fix changes the program


def _fix_data_loading(loop: Loop) -> Loop:
    # enough workers that the batch is always ready: __next__ is only the hand-off
    return dataclasses.replace(
        loop, num_workers=max(loop.num_workers, 8), load_ns=min(loop.load_ns, 1_000), handoff_ns=loop.handoff_ns, stall_ns=0
    )


def _fix_sync(loop: Loop) -> Loop:
    return dataclasses.replace(loop, item_per_layer=False, step_sync=None)


def _fix_pageable(loop: Loop) -> Loop:
    return dataclasses.replace(loop, pinned=True, non_blocking=True)


def _fix_launch(loop: Loop) -> Loop:
    # CUDA graphs: the host's per-kernel dispatch and launch cost shrink twentyfold
    return dataclasses.replace(loop, dispatch_ns=loop.dispatch_ns // 20, launch_ns=loop.launch_ns // 20)


def _fix_allocator(loop: Loop) -> Loop:
    return dataclasses.replace(loop, mallocs_per_step=0)


def _fix_tensor_cores(loop: Loop) -> Loop:
    # the smallest change that puts fp32 GEMMs on tensor cores: TF32 (AMP would also halve the
    # elementwise kernels' bytes, a saving the replay's stated fix does not claim)
    return dataclasses.replace(loop, tf32=True)


def _fix_cpu(loop: Loop) -> Loop:
    return dataclasses.replace(loop, python_ns=0, host_tail_ns=0, gc_ns=0)


#: finding kind → the program edit that fixes it
FIXES: dict[str, Callable[[Loop], Loop]] = {
    "data_loading": _fix_data_loading,
    "host_device_sync": _fix_sync,
    "pageable_memcpy": _fix_pageable,
    "launch_bound": _fix_launch,
    "allocator": _fix_allocator,
    "no_tensor_cores": _fix_tensor_cores,
    "cpu_bound": _fix_cpu,
}


def truth(loop: Loop, fix: str) -> float:
    """The steady-state step time (ns) of ``loop`` re-simulated with ``fix`` applied."""
    return simulate(FIXES[fix](loop)).steady_step_ns


def mean_truth(loop: Loop, fix: str) -> float:
    """The mean steady-state step (ns) of ``loop`` re-simulated with ``fix`` applied."""
    return simulate(FIXES[fix](loop)).mean_steady_step_ns


#: scenario name → (the loop, the fixes that apply to it)
SCENARIOS: dict[str, tuple[Loop, tuple[str, ...]]] = {
    # the host (main-thread loading) is slower than the GPU; a pageable copy blocks a little
    "host_slower": (
        Loop("host_slower", load_ns=40_000_000, batch_bytes=48 << 20, layers=6),
        ("data_loading", "pageable_memcpy"),
    ),
    # load on the main thread -> step -> loss.item(): the sync prevents loading the next batch
    # while the GPU computes
    "sync_prevents_overlap": (
        Loop("sync_prevents_overlap", load_ns=30_000_000, layers=10, gemm_ns=3_000_000, elementwise_ns=500_000, step_sync="item"),
        ("host_device_sync", "data_loading"),
    ),
    "stream_sync_overlap": (
        Loop("stream_sync_overlap", load_ns=25_000_000, layers=10, gemm_ns=3_000_000, elementwise_ns=400_000, step_sync="stream_sync", sync_rows=False),
        ("host_device_sync", "data_loading"),
    ),
    # .item() after every layer: the host waits for the GPU 24 times a step
    "item_per_layer": (
        Loop("item_per_layer", layers=24, num_workers=4, load_ns=20_000_000, pinned=True, non_blocking=True, gemm_ns=400_000,
             elementwise_ns=150_000, dispatch_ns=60_000, python_ns=30_000, item_per_layer=True),
        ("host_device_sync",),
    ),
    # a big pageable copy that blocks the host while the GPU has work queued
    "pageable": (
        Loop("pageable", num_workers=4, load_ns=20_000_000, batch_bytes=256 << 20, layers=8, gemm_ns=1_500_000, step_sync="item"),
        ("pageable_memcpy",),
    ),
    # 2,000 tiny kernels per step issued from Python
    "launch_bound": (
        Loop("launch_bound", num_workers=4, load_ns=5_000_000, pinned=True, non_blocking=True, batch_bytes=1 << 20, layers=200,
             elementwise_per_layer=3, gemm_ns=6_000, elementwise_ns=3_000, dispatch_ns=14_000, launch_ns=6_000, python_ns=0,
             optimizer_kernels=0, steps=8),
        ("launch_bound",),
    ),
    "allocator_churn": (
        Loop("allocator_churn", num_workers=4, load_ns=10_000_000, pinned=True, non_blocking=True, layers=8, mallocs_per_step=60,
             malloc_ns=250_000, step_sync="item"),
        ("allocator",),
    ),
    "no_amp": (
        Loop("no_amp", num_workers=4, load_ns=10_000_000, pinned=True, non_blocking=True, layers=12, gemm_ns=4_000_000, step_sync="item", elementwise_per_layer=1,
             elementwise_ns=600_000),
        ("no_tensor_cores",),
    ),
    "mixed": (
        Loop("mixed", load_ns=12_000_000, batch_bytes=96 << 20, layers=10, gemm_ns=1_200_000, item_per_layer=True,
             mallocs_per_step=20, malloc_ns=200_000, dispatch_ns=30_000, python_ns=10_000),
        ("data_loading", "host_device_sync", "pageable_memcpy", "allocator"),
    ),
    # a healthy loop with one-time costs in its first step
    "warmup": (
        Loop("warmup", num_workers=4, load_ns=10_000_000, pinned=True, non_blocking=True, layers=12, gemm_ns=2_000_000, step_sync="item", amp=True,
             warmup_ns=400_000_000, steps=8),
        (),
    ),
    "healthy": (
        Loop("healthy", num_workers=4, load_ns=10_000_000, pinned=True, non_blocking=True, layers=12, gemm_ns=2_000_000, step_sync="item",
             amp=True, elementwise_ns=400_000),
        (),
    ),
}

#: causes present in only some steps (the median step does not see them): scenario name →
#: (the loop, the fixes that apply); held to the re-simulated *mean* steady-state step
INTERMITTENT: dict[str, tuple[Loop, tuple[str, ...]]] = {
    # the main thread builds each batch; every 4th batch stalls 60 ms (a slow shard, a cold cache)
    "loader_stalls": (
        Loop("loader_stalls", steps=13, load_ns=2_000_000, stall_every=4, stall_ns=60_000_000, layers=8, gemm_ns=1_500_000,
             step_sync="item", pinned=True, non_blocking=True, batch_bytes=4 << 20),
        ("data_loading", "host_device_sync"),
    ),
    # workers keep up except every 5th batch, which takes 120 ms: prefetch hides part of it
    "worker_stalls": (
        Loop("worker_stalls", steps=16, num_workers=2, prefetch_factor=1, load_ns=15_000_000, stall_every=5, stall_ns=120_000_000,
             layers=8, gemm_ns=1_500_000, step_sync="item", pinned=True, non_blocking=True, batch_bytes=4 << 20),
        ("data_loading",),
    ),
    # a garbage-collector pause of 40 ms in every 3rd step, on an otherwise GPU-bound loop
    "gc_pauses": (
        Loop("gc_pauses", steps=13, num_workers=4, load_ns=5_000_000, pinned=True, non_blocking=True, layers=8, gemm_ns=2_000_000,
             step_sync="item", gc_every=3, gc_ns=40_000_000, python_ns=0),
        # without the sync the host runs ahead and the queued GPU work hides the pause
        ("cpu_bound", "host_device_sync"),
    ),
}
