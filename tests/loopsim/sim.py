"""Discrete-event simulation of a PyTorch training loop under CUDA semantics.

What is modelled (one host thread driving one CUDA stream, unless a loop asks for more):

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
  costs a host copy at memory bandwidth on the main thread when the loader has no workers;
  with workers a pin-memory thread does it off the main thread (free, unless the loop models
  that thread: :attr:`Loop.pin_thread`).
* **DataLoader.**  ``num_workers=0``: the main thread builds the batch inside ``__next__``.
  ``num_workers=N``: N worker processes prefetch (``prefetch_factor`` batches each) from the
  moment the iterator is created; ``__next__`` waits for the batch, then pays a hand-off (a
  fixed cost, plus a cost per byte when the loop sets one).
* **Allocator.**  ``cudaMalloc``/``cudaFree`` calls cost host time (the caching allocator's
  steady state has none).
* **Kernel durations** under fp32, TF32 or AMP: TF32 runs GEMMs on tensor cores
  (÷ :data:`TF32_GEMM`); AMP too (÷ :data:`AMP_GEMM`), elementwise kernels on half the bytes
  (÷ :data:`AMP_ELEMENTWISE`) and adds a cast kernel per layer.  These are the simulator's own
  assumptions, deliberately not the replay's factor.
* **Warm-up.**  The first step may carry one-time costs (library init, a ``cudaMalloc`` burst).

Behaviours of real PyTorch a loop may ask for (:class:`~.loop.Loop`'s later fields):

* **The autograd device thread.**  ``loss.backward()`` seeds the gradient on the main thread
  and hands the graph to the engine's thread for the device (``pt_autograd_0``), which runs
  every node (``autograd::engine::evaluate_function: MmBackward0`` around ``MmBackward0``
  around its ``aten::`` ops and their launches, without Python between them) while the main
  thread waits; the main thread resumes a wake-up after the last node.  Forward operators and
  their backward nodes share a ``Sequence number`` and a ``fwdbwd`` flow.
* **CUDA graphs.**  A captured region's host work (Python, dispatch, launches, the optimizer's
  annotation, allocations from the graph's pool) is one replay: the replay wrapper's cost and
  one ``cudaGraphLaunch``, whose kernels all carry its correlation and run back to back,
  :data:`GRAPH_GAP_NS` apart, with their own durations.  A sync inside the region cuts it in
  two (the sync runs eagerly between the two replays).
* **Element-wise transfers**: N reads of one element, each a 4-byte device→host copy and a
  sync, or the fix: one copy of the whole tensor and the loop on the host.
* **The pin-memory thread** (its own row in the trace) takes each batch from the workers,
  pays its hand-off and pins it at memory bandwidth, in the order of the batches.
* **record_shapes** (``Input Dims``/``Input type``) and **fused elementwise chains**.

The step time is measured the way a user experiences throughput: step ``k`` ends when the
host starts step ``k + 1`` and the GPU finished the work step ``k`` launched, whichever is
later; the steady-state step time is the median over every step but the first.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .loop import (
    AMP_ELEMENTWISE,
    AMP_GEMM,
    AMP_GEMM_NAME,
    CAST,
    ELEMENTWISE,
    FILL,
    FP32_GEMM,
    FUSED_BACKWARD,
    FUSED_FORWARD,
    FUSED_OP_COST,
    GRAPH_CALL_NS,
    GRAPH_GAP_NS,
    GRAPH_NODE_NS,
    LAUNCH_LATENCY_NS,
    OPT_KERNEL,
    PIN_QUEUE_NS,
    QUEUE_DEPTH,
    STREAM_GAP_NS,
    TF32_GEMM,
    TF32_GEMM_NAME,
    THREAD_WAKE_NS,
    WAKE_NS,
    Loop,
)

#: the host threads a run records on (the Kineto writer gives each its tid and name)
THREADS = ("main", "autograd", "pin")


@dataclass
class HostEv:
    cat: str
    name: str
    start: int
    end: int
    correlation: int | None = None
    #: what the simulator knows of the call (not written to the trace)
    args: dict[str, Any] = field(default_factory=dict)
    #: one of :data:`THREADS`
    thread: str = "main"
    #: args the Kineto writer records with the row (shapes, sequence numbers)
    record: dict[str, Any] = field(default_factory=dict)
    #: a ``fwdbwd`` flow end on this row: ("s" on the forward op | "f" on its backward node, id)
    flow: tuple[str, int] | None = None


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


#: a kernel captured into a graph: category, name, duration, args
_Captured = tuple[str, str, int, dict[str, Any]]


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
        # the pin-memory thread: when it is free, and when each batch is pinned
        self.pin_free = self.t
        self.pinned_ready: list[int] = []
        # the thread the host rows are recorded on (the clock is shared: the main thread is
        # blocked whenever the autograd thread runs)
        self.thread = "main"
        # CUDA graphs: the kernels captured so far (None: eager), and the range a replay sits in
        self.capture: list[_Captured] | None = None
        self.capture_label: str | None = None
        # autograd: the forward ops' nodes of this step (kind, sequence number, fwdbwd flow id)
        self.fwd_nodes: list[tuple[str, int, int]] = []
        self.sequence_nr = 0
        self.fwdbwd_id = 0

    # ------------------------------------------------------------------ host primitives
    def rng(self, cat: str, name: str, body: Callable[[], None], *, record: dict[str, Any] | None = None,
            flow: tuple[str, int] | None = None) -> None:
        if self.capture is not None:  # a replayed region runs no host code
            body()
            return
        ev = HostEv(cat, name, self.t, self.t, thread=self.thread, record=dict(record or {}), flow=flow)
        self.host.append(ev)
        body()
        ev.end = self.t

    def op(self, name: str, body: Callable[[], None] | None = None, *, record: dict[str, Any] | None = None,
           python: bool = True, flow: tuple[str, int] | None = None) -> None:
        """An operator: half its dispatch cost before what it does, half after; then the
        Python before the next one (none on the autograd thread: ``python=False``)."""
        if self.capture is not None:
            if body is not None:
                body()
            return
        half = self.loop.dispatch_ns // 2

        def run() -> None:
            self.t += half
            if body is not None:
                body()
            self.t += self.loop.dispatch_ns - half

        self.rng("cpu_op", name, run, record=record, flow=flow)
        if python:
            self.t += self.loop.python_ns

    def api(self, name: str, cost: int, *, until: int | None = None, correlation: int | None = None) -> HostEv:
        start = self.t
        end = start + cost if until is None else max(start + cost, until)
        # the driver API (Triton's cuLaunchKernel) has its own category
        cat = "cuda_driver" if name.startswith("cu") and not name.startswith("cuda") else "cuda_runtime"
        ev = HostEv(cat, name, start, end, correlation=correlation, thread=self.thread)
        if self.capture is not None:  # (an allocation inside a captured region comes from the graph's pool)
            return ev
        self.host.append(ev)
        self.t = end
        return ev

    def _queue_wait(self) -> int:
        """The time the host may issue the next launch (the launch queue holds QUEUE_DEPTH)."""
        if len(self.starts) >= QUEUE_DEPTH:
            return self.starts[-QUEUE_DEPTH]
        return 0

    def launch(self, cat: str, name: str, dur: int, *, api: str = "cudaLaunchKernel", blocking: bool = False, **args: Any) -> GpuEv:
        if self.capture is not None:
            self.capture.append((cat, name, dur, dict(args)))
            return GpuEv(cat, name, 0, 0, 0, args=dict(args))
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
        if self.capture is not None:
            self._eager(self.stream_sync)
            return
        self.corr += 1
        ev = self.api("cudaStreamSynchronize", 3_000, until=self.gpu_free + WAKE_NS, correlation=self.corr)
        if self.loop.sync_rows:
            self.syncs.append(SyncEv(ev.start, ev.end, self.corr))

    def _dtoh(self, nbytes: int) -> None:
        """A device→host copy into pageable memory and the sync PyTorch issues after it."""
        dur = max(2_000, int(nbytes / self.loop.pageable_bw))
        self.launch("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", dur, api="cudaMemcpyAsync", bytes=nbytes)
        self.stream_sync()

    def item(self) -> None:
        if self.capture is not None:
            self._eager(self.item)
            return
        self.op("aten::item", lambda: self.rng("cpu_op", "aten::_local_scalar_dense", lambda: self._dtoh(4)))

    def to_cpu(self, nbytes: int) -> None:
        """``tensor.cpu()`` of a CUDA tensor: aten::to → _to_copy → copy_ (a copy and a sync)."""
        if self.capture is not None:
            self._eager(lambda: self.to_cpu(nbytes))
            return

        def copy() -> None:
            self.rng("cpu_op", "aten::copy_", lambda: self._dtoh(nbytes))

        self.op("aten::to", lambda: self.rng("cpu_op", "aten::_to_copy", copy))

    # ------------------------------------------------------------------ CUDA graphs
    def region_start(self, label: str | None) -> None:
        """Start capturing: from here the host runs nothing until the region's replay.
        ``label`` names the operator range a replay sits in (None: a bare cudaGraphLaunch)."""
        self.capture = []
        self.capture_label = label

    def region_end(self) -> None:
        """Replay what the region captured since its start or its last sync."""
        self._flush()
        self.capture_label = None

    def _eager(self, fn: Callable[[], None]) -> None:
        """A sync inside a captured region: what came before replays, the sync runs eagerly,
        and a new capture starts after it."""
        self._flush()
        fn()
        self.capture = []

    def _flush(self) -> None:
        kernels = self.capture or []
        self.capture = None
        if not kernels:
            return
        label = self.capture_label
        if label is None:
            self._graph_launch(kernels)
        else:
            self.rng("cpu_op", label, lambda: self._graph_launch(kernels))

    def _graph_launch(self, kernels: list[_Captured]) -> None:
        """One replay: the wrapper's Python, then cudaGraphLaunch; the kernels run back to back."""
        self.t += self.loop.graph_launch_ns
        self.corr += 1
        corr = self.corr
        call_start = self.t
        issue = max(call_start + GRAPH_CALL_NS + GRAPH_NODE_NS * len(kernels), self._queue_wait())
        start = max(issue + LAUNCH_LATENCY_NS, self.gpu_free + STREAM_GAP_NS)
        self.starts.append(start)
        for cat, name, dur, args in kernels:
            end = start + max(dur, 1_000)
            self.gpu.append(GpuEv(cat, name, start, end, corr, args=args))
            self.gpu_free = end
            start = end + GRAPH_GAP_NS
        self.step_last_gpu = max(self.step_last_gpu, self.gpu_free)
        self.api("cudaGraphLaunch", issue - call_start, correlation=corr)

    # ------------------------------------------------------------------ the DataLoader
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
            if self._pin_thread:
                self.t = max(self.t, self.pinned_ready[b]) + PIN_QUEUE_NS
            else:
                self.t = max(self.t, self.ready[b]) + self._handoff_ns
            self.taken.append(self.t)

        self.rng("user_annotation", "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", wait)

    @property
    def _pin_thread(self) -> bool:
        return self.loop.pin_thread and self.loop.pinned and self.loop.num_workers > 0

    @property
    def _handoff_ns(self) -> int:
        """Taking a batch from a worker: the queue get and unpickling its tensors' storages."""
        return self.loop.handoff_ns + int(self.loop.handoff_ns_per_byte * self.loop.batch_bytes)

    def _produce(self, b: int) -> None:
        loop = self.loop
        w = b % loop.num_workers
        # a worker may run at most prefetch_factor batches ahead of what the main thread took
        slot = b - loop.num_workers * loop.prefetch_factor
        free = self.taken[slot] if slot >= 0 and slot < len(self.taken) else self.worker_free[w]
        start = max(self.worker_free[w], free)
        self.worker_free[w] = start + self._load_ns(b)
        self.ready.append(self.worker_free[w])
        if self._pin_thread:
            self._pin(self.ready[-1])

    def _pin(self, ready: int) -> None:
        """The pin-memory thread takes the batch (the hand-off, untraced Python) and pins it."""
        got = max(ready, self.pin_free) + self._handoff_ns
        done = got + int(self.loop.batch_bytes / self.loop.memory_bw)
        self.host.append(HostEv("cpu_op", "aten::pin_memory", got, done, thread="pin"))
        self.host.append(HostEv("cpu_op", "aten::_pin_memory", got + 500, done - 500, thread="pin"))
        self.pin_free = done
        self.pinned_ready.append(done)

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

    # ------------------------------------------------------------------ the model
    def kernel_op(self, name: str, kernel: str, dur: int, *, api: str = "cudaLaunchKernel", record: dict[str, Any] | None = None,
                  python: bool = True, flow: tuple[str, int] | None = None) -> None:
        """An operator that launches one kernel (``api``: Triton's kernels use the driver's)."""
        self.op(name, lambda: (self.launch("kernel", kernel, dur, api=api), None)[1], record=record, python=python, flow=flow)

    def shapes(self, kind: str) -> dict[str, Any]:
        """``Input Dims`` and ``Input type`` of a layer's operator (empty without record_shapes)."""
        loop = self.loop
        if not loop.record_shapes:
            return {}
        m, n, k = loop.gemm_mnk
        dt = "c10::BFloat16" if loop.amp else "float"
        dims: dict[str, tuple[list[list[int]], list[str]]] = {
            "mm": ([[m, k], [k, n]], [dt, dt]),
            "mm_grad_input": ([[m, n], [n, k]], [dt, dt]),
            "mm_grad_weight": ([[k, m], [m, n]], [dt, dt]),
            "elementwise": ([[m, n]], [dt]),
            "elementwise_backward": ([[m, n], [m, n]], [dt, dt]),
            "cast": ([[k, n]], ["float"]),
        }
        shape, types = dims[kind]
        return {"Input Dims": shape, "Input type": types}

    def _kernels(self) -> tuple[tuple[str, int], int]:
        """The layer's GEMM kernel (name, duration) and elementwise duration under fp32/TF32/AMP."""
        loop = self.loop
        gemm = (FP32_GEMM, loop.gemm_ns)
        if loop.amp:
            gemm = (AMP_GEMM_NAME, int(loop.gemm_ns / AMP_GEMM))
        elif loop.tf32:
            gemm = (TF32_GEMM_NAME, int(loop.gemm_ns / TF32_GEMM))
        ew = int(loop.elementwise_ns / AMP_ELEMENTWISE) if loop.amp else loop.elementwise_ns
        return gemm, ew

    def _node_of_forward(self, kind: str) -> tuple[dict[str, Any], tuple[str, int]]:
        """A forward op that the autograd thread's backward will visit: its sequence number
        and the start of the ``fwdbwd`` flow to its node (both recorded on the op's row)."""
        self.sequence_nr += 1
        self.fwdbwd_id += 1
        self.fwd_nodes.append((kind, self.sequence_nr, self.fwdbwd_id))
        return {"Sequence number": self.sequence_nr, "Fwd thread id": 0}, ("s", self.fwdbwd_id)

    def layer(self, backward: bool, python: bool = True) -> None:
        loop = self.loop
        gemm, ew = self._kernels()
        # the forward ops of an eager model whose backward runs on the autograd thread: nodes
        nodes = loop.backward_thread and not loop.compiled and self.capture is None and not backward

        def model_op(name: str, kernel: str, dur: int, shape: str, node: str) -> None:
            record, flow = self._node_of_forward(node) if nodes else ({}, None)
            self.kernel_op(name, kernel, dur, record={**self.shapes(shape), **record}, python=python, flow=flow)

        if loop.amp and not backward:
            self.kernel_op("aten::_to_copy", CAST, max(ew // 4, 2_000), record=self.shapes("cast"), python=python)
        for shape in ("mm_grad_input", "mm_grad_weight") if backward else ("mm",):
            model_op("aten::mm", gemm[0], gemm[1], shape, "mm")
        count = loop.elementwise_per_layer * (2 if backward else 1)
        if loop.fused_elementwise and count:
            fused = FUSED_BACKWARD if backward else FUSED_FORWARD
            self.kernel_op(fused, fused, int(ew * (1 + FUSED_OP_COST * (count - 1))), api="cuLaunchKernel", python=python)
            return
        for _ in range(count):
            model_op("aten::gelu", ELEMENTWISE, ew, "elementwise", "gelu")

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
        if loop.batches:
            self.next_batch(k)
            self.copy_in()
        if k == 0 and loop.warmup_ns:
            self.warmup()
        self.fwd_nodes = []
        if loop.cuda_graphs is not None:
            # whole-step capture replays bare; torch.compile's forward replays in its CompiledFunction
            self.region_start("CompiledFunction" if loop.cuda_graphs == "compile" else None)
        for _ in range(loop.layers):
            self.layer(backward=False)
            if loop.item_per_layer:
                self.item()
        if loop.cuda_graphs == "compile":
            self.region_end()

    def backward(self) -> None:
        """The backward pass: on the host thread (the one-thread model, or inside a whole-step
        capture, which replays without calling it), or on the autograd thread."""
        loop = self.loop
        if loop.backward_thread and self.capture is None:
            self._autograd_thread()
        elif loop.compiled and self.capture is None:
            self._compiled_backward(python=True)
        else:
            for _ in range(loop.layers):
                self.layer(backward=True)

    def _compiled_backward(self, python: bool) -> None:
        """torch.compile's backward: one CompiledFunctionBackward running every layer's
        backward, replayed as one graph under mode="reduce-overhead"."""
        loop = self.loop

        def layers() -> None:
            for _ in range(loop.layers):
                self.layer(backward=True, python=python)

        if loop.cuda_graphs == "compile":
            # on the autograd thread the node's range holds the replay; on one thread, a range of its own
            self.region_start(None if self.thread == "autograd" else "CompiledFunctionBackward")
            layers()
            self.region_end()
        elif self.thread == "autograd":
            layers()
        else:
            self.rng("cpu_op", "CompiledFunctionBackward", layers)

    def _autograd_thread(self) -> None:
        """``loss.backward()``: the main thread seeds the gradient and waits while the engine's
        device thread runs the graph's nodes, newest first, then wakes the main thread."""
        loop = self.loop
        nodes, self.fwd_nodes = self.fwd_nodes, []

        def engine() -> None:
            self.op("aten::ones_like", lambda: self.rng("cpu_op", "aten::fill_", lambda: (self.launch("kernel", FILL, 2_000), None)[1]))
            self.t += THREAD_WAKE_NS
            self.thread = "autograd"
            if loop.compiled:
                self._node("CompiledFunctionBackward", lambda: self._compiled_backward(python=False))
                for _ in range(loop.layers):
                    self._node("torch::autograd::AccumulateGrad", None)
            else:
                for kind, seq, flow in reversed(nodes):
                    self._backward_node(kind, seq, flow)
            self.thread = "main"
            self.t += THREAD_WAKE_NS

        if loop.backward_label is None:
            engine()
        else:
            self.rng("user_annotation", loop.backward_label, engine)

    def _backward_node(self, kind: str, seq: int, flow: int) -> None:
        """The node of one forward op: a GEMM's two gradient GEMMs (then its weight's
        AccumulateGrad), or an elementwise op's backward and the sum of the gradients of the
        two uses of its input (the one-thread loop's twice as many elementwise kernels)."""
        gemm, ew = self._kernels()
        if kind == "mm":
            def grads() -> None:
                for shape in ("mm_grad_input", "mm_grad_weight"):
                    self.kernel_op("aten::mm", gemm[0], gemm[1], record=self.shapes(shape), python=False)

            self._node("MmBackward0", grads, seq=seq, flow=flow)
            self._node("torch::autograd::AccumulateGrad", None)
            return

        def accumulate() -> None:
            self.kernel_op("aten::add", ELEMENTWISE, ew, record=self.shapes("elementwise_backward"), python=False)

        self._node(
            "GeluBackward0",
            lambda: self.kernel_op("aten::gelu_backward", ELEMENTWISE, ew, record=self.shapes("elementwise_backward"), python=False),
            after=accumulate, seq=seq, flow=flow,
        )

    def _node(self, name: str, body: Callable[[], None] | None, *, after: Callable[[], None] | None = None,
              seq: int | None = None, flow: int | None = None) -> None:
        """One node on the autograd thread: ``evaluate_function`` around the node's range, and
        the engine's cost: a quarter before the node's range, a quarter inside it before its
        ops (unpacking what the forward saved), the rest before the next node."""
        quarter = self.loop.autograd_node_ns // 4
        record = {} if seq is None else {"Sequence number": seq, "Fwd thread id": 1}

        def node() -> None:
            self.t += quarter
            if body is not None:
                body()

        def evaluate() -> None:
            self.t += quarter
            self.rng("cpu_op", name, node, record=record, flow=None if flow is None else ("f", flow))
            if after is not None:
                after()

        self.rng("cpu_op", f"autograd::engine::evaluate_function: {name}", evaluate, record=record)
        self.t += self.loop.autograd_node_ns - 2 * quarter

    def reads(self) -> None:
        """The element-wise transfer loop, or its fix: one copy, then the loop on the host."""
        loop = self.loop
        n = loop.elementwise_reads
        if n == 0:
            return
        if loop.bulk_read:
            self.to_cpu(4 * n)
            self.t += n * loop.host_read_ns  # the loop over a host list: untraced Python
            return
        for _ in range(n):
            self.op("aten::select")  # t[i]: a view, no kernel
            if loop.read_via == "item":
                self.item()
            else:
                self.to_cpu(4)

    def step_tail(self) -> None:
        """The step after its backward pass: the optimizer, the element-wise reads, the step's
        sync, the host's tail."""
        loop = self.loop

        def optimizer() -> None:
            for _ in range(loop.optimizer_kernels):
                self.kernel_op("aten::_fused_sgd_", OPT_KERNEL, loop.optimizer_ns)

        if loop.train:
            self.rng("user_annotation", "Optimizer.step#SGD.step", optimizer)
        if loop.cuda_graphs == "step":
            self.region_end()
        self.reads()
        if loop.step_sync == "item":
            self.item()
        elif loop.step_sync == "stream_sync":
            self.stream_sync()
        self.t += loop.host_tail_ns

    def step(self, k: int) -> None:
        loop = self.loop
        # a captured region's allocations come from the graph's pool
        mallocs = loop.mallocs_per_step if loop.cuda_graphs is None and loop.train else 0

        def body() -> None:
            self.forward(k)
            for _ in range(mallocs):
                self.op("aten::empty", lambda: (self.api("cudaMalloc", loop.malloc_ns), None)[1])
            if loop.train:
                self.backward()
            for _ in range(mallocs):
                self.op("aten::record_stream", lambda: (self.api("cudaFree", loop.malloc_ns), None)[1])
            self.step_tail()

        if loop.step_markers:
            self.rng("user_annotation", f"ProfilerStep#{k + 1}", body)
        else:
            body()


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
