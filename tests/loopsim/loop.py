"""The description of a simulated training loop (:class:`Loop`) and the simulator's own constants.

Every constant here is the simulator's assumption about the hardware or PyTorch, deliberately
not the analysis' factor: the truth a prediction is held to must not share its guesses.
"""

from __future__ import annotations

from dataclasses import dataclass

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

#: a thread blocked on a condition variable (the autograd engine's ready queue, the main
#: thread waiting for the engine) runs again this long after it was signalled
THREAD_WAKE_NS = 10_000
#: the gap between consecutive kernels of one CUDA graph (the device schedules them itself,
#: with no launch of its own per kernel)
GRAPH_GAP_NS = 500
#: cudaGraphLaunch's own cost on the host: a fixed part and a part per kernel node
GRAPH_CALL_NS = 5_000
GRAPH_NODE_NS = 200
#: an elementwise chain fused into one kernel moves the tensor's bytes once; each fused
#: operator beyond the first adds this share of one operator's time (its arithmetic)
FUSED_OP_COST = 0.15
#: ``__next__`` on the main thread when a pin-memory thread feeds it: a get from a thread
#: queue and the next index sent to a worker (the unpickling happened on the pin thread)
PIN_QUEUE_NS = 40_000
#: the hand-off of a batch from a worker measured on the real ResNet-50 ``num_workers=4``
#: trace (../shared/traces/kineto/tb_plugin_pair, V100, PyTorch of 2021): the main thread's
#: steady ``__next__`` takes 1.40 ms for a batch of 19,267,840 bytes in two tensors (images
#: and labels); rebuilding the 19.3 MB tensor takes 378 us more than rebuilding the 256-byte
#: one, so the hand-off is about 1.02 ms per batch plus 0.0196 ns per byte
#: (tests/test_loopsim.py measures both again from the trace)
RESNET50_HANDOFF_NS = 1_023_000
RESNET50_HANDOFF_NS_PER_BYTE = 0.0196

FP32_GEMM = "volta_sgemm_128x64_nn"
TF32_GEMM_NAME = "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_stage3_warpsize2x2x1_tensor16x8x8_kernel"
AMP_GEMM_NAME = "sm80_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&)::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&)::{lambda(float)#1}, at::detail::Array<char*, 2>)"
CAST = "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(float)#1}>(int, ...)"
OPT_KERNEL = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<3>, at::native::(anonymous namespace)::FusedSgdMathFunctor<float, 3> >(...)"
FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)"
#: Inductor's names for a fused elementwise chain (the operator range and its kernel share it)
FUSED_FORWARD = "triton_poi_fused_gelu_0"
FUSED_BACKWARD = "triton_poi_fused_gelu_backward_1"

#: the regions :attr:`Loop.cuda_graphs` may capture
GRAPH_MODES = (None, "step", "compile")


@dataclass(frozen=True)
class Loop:
    """One training loop (all times in ns, sizes in bytes, bandwidths in bytes per ns = GB/s).

    The fields after ``gc_ns`` are behaviours of real PyTorch added later; each is off by
    default, so a loop that does not ask for one simulates and writes exactly as before.
    """

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

    # ---------------------------------------------------------------- behaviours added later
    #: a training step (forward, backward, optimizer); False: forward only (an evaluation function)
    train: bool = True
    #: each step takes a batch from the DataLoader and copies it to the GPU; False: no loader
    #: (a function called in a loop)
    batches: bool = True
    #: the backward pass runs on the autograd engine's device thread (``pt_autograd_0``) while
    #: the main thread waits inside ``loss.backward()``, as in real CUDA training
    backward_thread: bool = False
    #: with ``backward_thread``: the user's ``record_function`` range around ``loss.backward()``
    #: on the main thread (the name the real traces in ../shared use); None: no range, the
    #: profiler's default (PyTorch records none of its own there)
    backward_label: str | None = "## backward ##"
    #: the autograd engine's own cost per node on the device thread (ready queue, input
    #: buffers): half inside the node's ``evaluate_function`` range, half before the next node
    autograd_node_ns: int = 8_000
    #: CUDA graphs: None (eager); "step": forward, backward and optimizer captured with
    #: ``torch.cuda.graph`` and replayed by the main thread; "compile":
    #: ``torch.compile(mode="reduce-overhead")``, the model's forward graph replayed by the
    #: main thread and its backward graph by the thread that runs the backward, the optimizer
    #: eager.  A sync cannot be captured: the region is cut at every one (a graph break)
    cuda_graphs: str | None = None
    #: host cost of one graph replay before its cudaGraphLaunch (the Python replay wrapper,
    #: for torch.compile its guards and the cudagraph tree's checks)
    graph_launch_ns: int = 20_000
    #: element-wise transfers after the optimizer: a Python loop reading one element of a
    #: CUDA tensor per iteration (``t[i].cpu()`` or ``t[i].item()``), each a 4-byte copy and a sync
    elementwise_reads: int = 0
    #: "cpu" (``.cpu()``: aten::to, _to_copy, copy_) or "item" (``.item()``)
    read_via: str = "cpu"
    #: the fix of such a loop: one transfer of the whole tensor, then the loop on the host
    bulk_read: bool = False
    #: Python per element of that host loop (indexing a list and the loop itself)
    host_read_ns: int = 150
    #: whether the trace marks steps (``ProfilerStep#N``); a function called in a loop has none
    step_markers: bool = True
    #: with workers and ``pinned``: the DataLoader's pin-memory thread takes each batch from the
    #: workers (paying the hand-off), copies it into pinned memory at ``memory_bw`` and queues
    #: it for the main thread; False: pinning with workers costs nothing (the old model)
    pin_thread: bool = False
    #: the per-byte part of a batch's hand-off from a worker (unpickling rebuilds its storages);
    #: see :data:`RESNET50_HANDOFF_NS_PER_BYTE`
    handoff_ns_per_byte: float = 0.0
    #: ``record_shapes=True``: ``Input Dims`` and ``Input type`` on the operators
    record_shapes: bool = False
    #: the layer's GEMM (M, N, K): input (M, K), weight (K, N), activations (M, N)
    gemm_mnk: tuple[int, int, int] = (4096, 4096, 4096)
    #: each layer's elementwise chain fused into one kernel (torch.compile's Inductor), in the
    #: forward pass and in the backward
    fused_elementwise: bool = False

    def __post_init__(self) -> None:
        if self.cuda_graphs not in GRAPH_MODES:
            raise ValueError(f"{self.name}: cuda_graphs must be one of {GRAPH_MODES}, not {self.cuda_graphs!r}")
        if self.read_via not in ("cpu", "item"):
            raise ValueError(f"{self.name}: read_via must be 'cpu' or 'item', not {self.read_via!r}")

    @property
    def compiled(self) -> bool:
        """Whether torch.compile runs the model (its backward is then one compiled node)."""
        return self.cuda_graphs == "compile" or self.fused_elementwise
