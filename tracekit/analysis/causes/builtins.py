"""tracekit's own vocabulary: every built-in cause, critical-path category, what-if knob and finding kind.

The order of :data:`ENTRIES` is the one order: reports list the causes in it, ties between
findings go to the earlier kind, and among the idle causes it is their precedence (the first
cause whose detector marks a host instant claims it; ties in a gap's cause go to the earlier).
So the causes whose detectors mark host intervals of their own come before the ones that take
any other host work by its length (``launch_bound``, ``cpu_bound``), and ``unattributed`` last.
"""

from __future__ import annotations

from . import detectors as D
from . import evidence as E
from .attribution import LAUNCH_GAP_NS, LongHostWork, OwnTime, ShortHostWork, SyncInduced, Untraced
from .model import (
    DETECTOR,
    ON_DARK,
    ON_LIGHT,
    WHITE,
    Cause,
    Edit,
    Entry,
    FindingKind,
    Fix,
    GpuMark,
    GraphCapture,
    Knob,
    PathCause,
)

#: CUDA graphs / torch.compile(mode="reduce-overhead") as the replay models them (see
#: :class:`~.model.GraphCapture`).  One replay's host cost: ``CUDAGraph.replay()``'s Python and
#: ``cudaGraphLaunch`` take some 10-30 µs (torch.compile adds its guards and the cudagraph
#: trees' checks to the upper end), and the launch a fraction of a µs more per kernel node; kernels of one graph start about 0.5 µs after the previous
#: one ends (NVIDIA's measurement of back-to-back short kernels in a graph, against a few µs
#: from a stream); a stretch of untraced host time shorter than the launch-overhead bound is
#: Python between operators, inside the region
#: a copy from or to pageable memory smaller than this moves too few bytes for pinning to pay:
#: the pageable fix leaves it as it is (64 KiB take about 6 µs even at pageable bandwidth)
PIN_MIN_BYTES = 64 << 10
GRAPH_REPLAY_NS = 25_000
GRAPH_NODE_NS = 200
GRAPH_KERNEL_GAP_NS = 500
#: AMP / TF32 as the replay models them: fp32 GEMM and convolution kernels are divided by this
REPLAY_TENSOR_CORE_SPEEDUP = 2.5
#: the critical path's what-if of the same fix: assumed speed-up of fp32 GEMMs once they run on
#: tensor cores (TF32/bf16); conservative: the hardware peak ratio is 8x or more, real models see
#: 2-3x end to end on matmuls
TENSOR_CORE_SPEEDUP = 2.0

_LAUNCH_FIX = Fix(
    Edit(graphs=GraphCapture(replay_ns=GRAPH_REPLAY_NS, node_ns=GRAPH_NODE_NS, kernel_gap_ns=GRAPH_KERNEL_GAP_NS, host_ns=LAUNCH_GAP_NS)),
    "CUDA graphs / torch.compile(mode='reduce-overhead'): each captured region's host work (Python, dispatch, "
    f"autograd, launches, on every thread) becomes one replay ({GRAPH_REPLAY_NS / 1000:g} µs + {GRAPH_NODE_NS} ns per "
    f"kernel), its kernels {GRAPH_KERNEL_GAP_NS} ns apart; syncs, data loading and longer host work stay eager",
)

ENTRIES: tuple[Entry, ...] = (
    Cause(
        "compute", "compute", "compute", "#4c78a8", "#5e9e6e", ON_LIGHT,
        "the GPU runs compute kernels (busy time, not idle)", on_color=WHITE,
        gpu=(GpuMark("fp32_matmul", D.fp32_matmul_kernel), GpuMark("kernel", D.kernel), GpuMark("memcpy", D.any_activity)),
        rest_of_gpu=True,
    ),
    Cause(
        "data_loading", "data loading", "data loading", "#f58518", "#d08770", ON_LIGHT,
        "DataLoader / `__next__` / collate / data-pipeline ranges",
        detector=D.data_loading_ranges, host_tag="data_loading", ends_sync_wait=True, without_gpu=True,
        knobs=(Knob("data_loading", frozenset({"data_loading"}), "data-loading stretches"),),
        finding=FindingKind(
            "data_loading", "The GPU waits for the DataLoader",
            "Load data in parallel and ahead of time: DataLoader(num_workers=N > 0 (start with the CPU cores per GPU), "
            "pin_memory=True, prefetch_factor=2-4, persistent_workers=True); move slow preprocessing (decode, augment) "
            "into the workers or onto the GPU; cache decoded samples.",
            "the GPU waits while the host loads/prepares the next batch",
            action="load batches in DataLoader workers (num_workers > 0, pin_memory=True)",
            host_title="The training loop waits for the DataLoader",
            host_fix="Load data in parallel and ahead of time: DataLoader(num_workers=N > 0, prefetch_factor=2-4, "
            "persistent_workers=True) so batches are ready when the loop asks; move slow preprocessing (decode, augment) "
            "into the workers; cache decoded samples.",
            evidence=E.data_loading_evidence, wording="data_loading",
            replay=Fix(Edit(host={"data_loading": 0.0}, workers=True), "the DataLoader's __next__ costs only a hand-off (workers keep up)"),
            replay_finds=True,
        ),
    ),
    Cause(
        "pageable_memcpy", "pageable copies", "pageable", "#b279a2", "#b48ead", ON_LIGHT,
        "a copy call whose host memory is pageable, or the operator around it (`aten::to`); "
        "also busy time when only such a copy runs", on_color=WHITE,
        detector=D.pageable_copy_calls, rule=OwnTime(queued=True), host_tag="pageable_memcpy",
        gpu=(GpuMark("pageable_memcpy", D.pageable_copy, owns_call=True),), keeps_own=D.copy_call_inside,
        knobs=(Knob("pageable_memcpy", frozenset({"pageable_memcpy"}),
                    "pageable copies, their launch and the host call blocked on them; factor 0 removes the wait "
                    "(the copy becomes asynchronous)"),),
        finding=FindingKind(
            "pageable_memcpy", "Copies from pageable (unpinned) host memory",
            "Copy from pinned memory: DataLoader(pin_memory=True) or tensor.pin_memory(), then "
            ".to(device, non_blocking=True) so the copy runs asynchronously and overlaps compute.",
            "copies from/to pageable host memory (`pin_memory=False`)",
            action="copy from pinned memory with non_blocking=True",
            evidence=E.pageable_evidence, wording="pageable_memcpy",
            replay=Fix(
                Edit(drop_sync=frozenset({"pageable_memcpy"}), pin=True, pin_min_bytes=PIN_MIN_BYTES),
                "pin_memory=True + non_blocking=True: copies no longer block the host and run at pinned bandwidth; "
                "with num_workers=0 the main thread pins each batch (a host copy at memory bandwidth); "
                f"copies under {PIN_MIN_BYTES >> 10} KiB stay as they are (their bandwidth does not matter)",
            ),
            replay_finds=True,
        ),
    ),
    Cause(
        "host_device_sync", "host-device sync", "host sync", "#e45756", "#bf616a", ON_DARK,
        "a synchronising call (`cudaStreamSynchronize`, `cudaDeviceSynchronize`, `cudaEventSynchronize`, "
        "blocking `cudaMemcpy`, HIP equivalents), an explicit sync row, or a data-dependent operator "
        "(`aten::item`, `aten::nonzero`...), or host code running after one", on_color=WHITE,
        detector=D.sync_calls, rule=SyncInduced(), host_tag="sync",
        knobs=(Knob("host_device_sync", frozenset({"sync"}),
                    "sync calls and data-dependent operators; factor 0 also removes their GPU → host waits"),),
        finding=FindingKind(
            "host_device_sync", "Host-device synchronisation stalls the GPU",
            "Remove synchronisations from the training loop: avoid .item(), .cpu(), .tolist(), print(tensor) and "
            "torch.cuda.synchronize() every step (accumulate metrics on the GPU and read them every N steps); avoid "
            "data-dependent ops (nonzero, boolean masks) in the hot path; never read a tensor element by element "
            "(.item() or .cpu() in a Python loop): transfer it once (t.tolist(), t.cpu()) or keep the logic on the GPU; "
            "use .to(device, non_blocking=True).",
            "the host waits for the GPU (`.item()`, `.cpu()`, `torch.cuda.synchronize`, blocking copies), draining its queue",
            action="remove the per-step host-device syncs (.item(), .cpu(), synchronize)",
            evidence=E.sync_evidence, wording="host_device_sync",
            replay=Fix(Edit(host={"sync": 0.0}, drop_sync=frozenset({"sync"}), collapse=D.scalar_reads),
                       "the sync calls and the waits for the GPU behind them are gone, a value's read "
                       "(`.item()`) with its copy (the host runs ahead)"),
            replay_finds=True,
        ),
    ),
    FindingKind(
        "elementwise_transfer", "A tensor is read element by element: one copy and sync per element",
        "Transfer the tensor once, then loop on the host: values = t.tolist() (or t.cpu() before the loop) instead of "
        "t[i].item() or t[i].cpu() per element; better, keep the logic on the GPU (vectorised tensor ops). Pinned "
        "memory does not help here: each tiny copy waits for the GPU, whatever its memory.",
        "a Python loop reading a CUDA tensor element by element: many tiny device→host copies in a row, each "
        "waiting for the GPU (sync in a loop)",
        what_if={"host_device_sync": 0.0},
        what_if_doc="`host_device_sync=0` (the waits of the reads gone)",
        evidence=DETECTOR, wording="elementwise_transfer",
        replay=Fix(Edit(collapse=D.transfer_loops),
                   "one transfer of the whole tensor: the first read stays (it waits for the GPU work that produced the "
                   "tensor); the other reads, their copies, their syncs and the host loop around them are gone"),
        cause="host_device_sync", detect=E.elementwise_transfers,
    ),
    Cause(
        "allocator", "allocator", "allocator", "#9d755d", "#ebcb8b", ON_LIGHT,
        "`cudaMalloc`/`cudaFree`-style calls", on_color=WHITE,
        detector=D.allocator_calls, host_tag="allocator",
        knobs=(Knob("allocator", frozenset({"allocator"}), "allocator calls"),),
        finding=FindingKind(
            "allocator", "Allocator calls (cudaMalloc/cudaFree) in the steady state",
            "Stop allocating in the steady state: keep shapes stable, reuse buffers, do not call torch.cuda.empty_cache() "
            "in the loop, try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.",
            "`cudaMalloc`/`cudaFree` in the steady state",
            action="stop allocating device memory in the steady state",
            evidence=E.allocator_evidence, wording="allocator",
            replay=Fix(Edit(host={"allocator": 0.0}), "caching allocator: no cudaMalloc/cudaFree in the steady state"),
            replay_finds=True,
        ),
    ),
    FindingKind(
        "no_tensor_cores", "Matrix multiplies run in fp32, without tensor cores",
        "Use the tensor cores: mixed precision with torch.autocast(device_type='cuda', dtype=torch.bfloat16) "
        "(or float16 with a GradScaler), or at least TF32 via torch.set_float32_matmul_precision('high').",
        "fp32 matrix multiplies on a GPU with tensor cores (no AMP/TF32)",
        action="run the matrix multiplies on tensor cores (AMP or TF32)",
        what_if={"fp32_matmul": 1.0 / TENSOR_CORE_SPEEDUP},
        what_if_doc="`fp32_matmul=0.5` (a conservative 2× speed-up on tensor cores)",
        evidence=DETECTOR, wording="no_tensor_cores",
        replay=Fix(Edit(gpu={"fp32_matmul": 1.0 / REPLAY_TENSOR_CORE_SPEEDUP}),
                   f"AMP/TF32: fp32 GEMM and convolution kernels ÷ {REPLAY_TENSOR_CORE_SPEEDUP:g}"),
        detect=E.fp32_matmuls, focus_kernels="fp32_matmul_kernels",
    ),
    FindingKind(
        "small_batch", "The batch is too small for this GPU",
        "Increase the batch size (scale the learning rate accordingly): matrix multiplies are too small to fill the GPU "
        "and most device memory is unused, so each step pays fixed launch costs for little work. If the batch must stay, "
        "cut the per-launch cost instead: torch.compile(mode='reduce-overhead') or CUDA graphs for the step.",
        "launch-bound, with most device memory unused and matrix multiplies too small to fill the GPU",
        action="increase the batch size (or capture the step in CUDA graphs)",
        # a larger batch amortises the per-launch cost: the step loses its launch overhead
        what_if={"launch_bound": 0.0},
        what_if_doc="`launch_bound=0` (a bigger batch amortises the per-launch cost)",
        evidence=DETECTOR, wording="launch_bound", replay=_LAUNCH_FIX,
        cause="launch_bound", detect=E.small_batch, refines="launch_bound",
    ),
    Cause(
        "exposed_communication", "exposed communication", "communication", "#72b7b2", "#88c0d0", ON_LIGHT,
        "a CPU-side collective call; also busy time when only communication kernels run",
        detector=D.collective_calls, host_tag="collective", gpu=(GpuMark("comm_kernel", D.communication_kernel),),
        knobs=(
            Knob("exposed_communication", frozenset({"comm_kernel", "collective"}), "communication kernels and host-side collectives"),
            Knob("communication", frozenset({"comm_kernel"}), "communication kernels"),
        ),
        finding=FindingKind(
            "exposed_communication", "Communication is not overlapped with compute",
            "Overlap communication with compute: tune DDP bucket_cap_mb, use gradient_as_bucket_view=True and no_sync() "
            "during accumulation; with FSDP enable backward_prefetch/forward_prefetch; check the interconnect.",
            "communication kernels running with no compute to hide them",
            action="overlap communication with compute",
            evidence=E.communication_evidence, wording="exposed_communication", job_wording="exposed_communication",
            job_title="Communication is not overlapped with compute (all ranks)",
            replay=Fix(Edit(host={"collective": 0.0}, gpu={"comm_kernel": 0.0}),
                       "communication fully overlapped with compute (its kernels and host calls take no time)"),
        ),
    ),
    Cause(
        "launch_bound", "launch overhead", "launch", "#eeca3b", "#a3be8c", ON_LIGHT,
        "other host work of at most 100 µs in the gap (op dispatch between short kernels), or the launch "
        "latency of queued work", rule=ShortHostWork(),
        knobs=(Knob("launch_bound", frozenset({"launch"}), "runtime/driver calls, dispatch, launch latency, stream gaps"),),
        finding=FindingKind(
            "launch_bound", "Launch-bound: kernels finish faster than the host launches them",
            "Give the GPU more work per launch: a larger batch, torch.compile (mode='reduce-overhead' adds CUDA graphs), "
            "CUDA graphs for the step, fused kernels and optimizers (foreach=True / fused=True).",
            "kernels finish faster than the host launches them",
            action="cut the per-kernel launch cost (CUDA graphs / torch.compile)",
            evidence=E.launch_evidence, wording="launch_bound", replay=_LAUNCH_FIX,
        ),
    ),
    Cause(
        "cpu_bound", "other host work", "host work", "#54a24b", "#5e81ac", ON_DARK,
        "other host work longer than 100 µs in the gap (optimizer, logging...)", rule=LongHostWork(),
        knobs=(Knob("cpu_bound", frozenset({"cpu"}), "other host work"),),
        finding=FindingKind(
            "cpu_bound", "The GPU waits for other host code",
            "Move host work off the GPU's path: log and compute metrics every N steps, use foreach/fused optimizers, "
            "avoid Python loops over parameters; profile with with_stack=True to find the lines.",
            "other host code (optimizer, logging) between GPU work",
            action="move other host work off the GPU's path",
            host_title="Host code other than the model dominates the step",
            evidence=E.host_work_evidence, wording="cpu_bound",
            replay=Fix(Edit(host={"cpu": 0.0}), "other host work (Python between operators, untraced time) removed"),
        ),
    ),
    Cause(
        "unattributed", "unattributed idle", "unattributed", "#bab0ac", "#7b8394", ON_DARK,
        "nothing recorded explains it; tracekit does not guess", rule=Untraced(),
    ),
    # a mostly idle step whose idle time nothing recorded explains: not a cause tracekit can
    # price, but what the trace knows about it and how to record the rest
    FindingKind(
        "untraced_idle", "The GPU is idle most of the step, and the trace does not record why",
        "Record what the host does in this time: profile with with_stack=True (the Python call stack shows the "
        "functions that ran: compilation, data preparation, I/O, waiting) and mark your own phases with "
        "torch.profiler.record_function. If the step calls a torch.compile'd region for the first time, the time "
        "is compilation, a one-time warm-up: profile steps after it (torch.profiler.schedule(wait=1, warmup=1, "
        "active=3), or run the compiled model once before profiling).",
        "a step idle most of the time (GPU idle ≥ 50%) whose idle time no recorded event explains",
        evidence=DETECTOR, wording="untraced_idle", cause="unattributed", detect=E.untraced_idle, priced=False,
    ),
    # busy but not efficient (analysis/efficiency.py): priced by scaling the compute kernels so that
    # they lose the finding's cost (the what-if engine), hence no fixed what-if here
    FindingKind(
        "fp32_gemm", "Matrix multiplies run in fp32 on a GPU with much faster bf16/TF32 units",
        "Run the matrix math in lower precision: torch.autocast(device_type='cuda', dtype=torch.bfloat16) for the "
        "forward pass (float16 needs a GradScaler), or at least TF32 with "
        "torch.set_float32_matmul_precision('high'); the evidence lists the fp32 shapes and the saving at each "
        "dtype's peak.",
        "fp32 GEMM/convolution operators (from recorded shapes and dtypes) on a GPU whose bf16/TF32 peak is far higher",
        action="run the matrix multiplies in bf16 (autocast) or TF32",
        what_if_doc="compute kernels scaled to lose the fp32 GEMMs' excess time at the bf16/TF32 peak",
        evidence=DETECTOR, wording="fp32_gemm",
        # the same cause, measured from the operators' dtypes rather than kernel names
        supersedes="no_tensor_cores",
    ),
    FindingKind(
        "small_gemm", "GEMMs too small to fill the GPU",
        "Give each GEMM more work: a larger batch (or micro-batch), fuse small projections (one GEMM for Q, K and V; "
        "batched GEMMs instead of loops), pad dimensions to multiples of 64/128; the evidence lists the shapes, "
        "their output tiles against the GPU's SM count and the TFLOP/s they reach.",
        "GEMMs whose output tiles leave most SMs idle (wave quantisation) and reach a small share of the peak",
        action="give each GEMM more work (a larger batch, fused projections)",
        what_if_doc="compute kernels scaled to lose the small GEMMs' time beyond a well-filled GPU's",
        evidence=DETECTOR, wording="small_gemm",
    ),
    FindingKind(
        "unfused_elementwise", "Chains of memory-bound elementwise kernels (unfused)",
        "Fuse elementwise chains into one kernel: torch.compile(model) (Inductor fuses pointwise ops and "
        "normalisations), fused optimizers (fused=True / foreach=True) and fused layers (e.g. fused LayerNorm, "
        "F.scaled_dot_product_attention); each unfused op reads and writes the whole tensor again.",
        "runs of memory-bound elementwise/normalisation kernels that a compiler would fuse",
        action="fuse the elementwise chains (torch.compile)",
        what_if_doc="compute kernels scaled to lose the traffic that fusing the chains saves",
        evidence=DETECTOR, wording="unfused_elementwise",
    ),
    FindingKind(
        "straggler", "Straggler rank(s): the other ranks wait in their collectives",
        "Find out why the late rank(s) are slow: compare their per-rank reports (data loading, host syncs, "
        "other host work), check the node (a slower or throttling GPU, a noisy neighbour, a slower NIC) and "
        "the data (uneven shards, longer sequences on some ranks: bucket samples by length).",
        "(job findings) some ranks start their collectives late; the others wait inside them",
        job=True, evidence=DETECTOR, job_wording="straggler",
    ),
    FindingKind(
        "load_imbalance", "Load imbalance: ranks do unequal amounts of GPU work",
        "Balance the work per rank: equalise batch shapes (pack or bucket variable-length sequences), "
        "rebalance pipeline stages or expert placement, and shard data evenly (drop_last, equal shard sizes).",
        "(job findings) ranks do unequal amounts of GPU compute per step",
        job=True, evidence=DETECTOR, job_wording="load_imbalance",
    ),
)

PATHS: tuple[PathCause, ...] = (
    PathCause("gpu_compute", "GPU compute", "compute", "good", "kernels (not communication)", ("kernel", "fp32_matmul")),
    PathCause("communication", "communication", "exposed_communication", "olive",
              "communication kernels, host-side collective calls", ("comm_kernel", "collective")),
    PathCause("memcpy", "copies", "pageable_memcpy", "yellow",
              "copies and memsets; host time blocked in pageable copies", ("memcpy", "pageable_memcpy")),
    PathCause("launch_overhead", "launch overhead", "launch_bound", "bad",
              "CUDA runtime/driver calls, operator dispatch around launches, launch latency, gaps on a stream", ("launch",)),
    PathCause("data_loading", "data loading", "data_loading", "terrible",
              "host time in DataLoader / collate / data-pipeline ranges", ("data_loading",)),
    PathCause("host_device_sync", "host-device sync", "host_device_sync", "terrible",
              "sync calls, data-dependent operators (`.item()`), waking up after the GPU", ("sync",)),
    PathCause("allocator", "allocator", "allocator", "bad", "`cudaMalloc`/`cudaFree`-style calls", ("allocator",)),
    PathCause("cpu_other", "other host work", "cpu_bound", "grey",
              "other host work, including the driving thread's untraced time", ("cpu", "wait")),
)

#: what-if knobs of the GPU's work as a whole, after every cause's own
DEVICE_KNOBS: tuple[Knob, ...] = (
    Knob("kernels", frozenset({"kernel", "fp32_matmul"}), "every compute kernel"),
    Knob("fp32_matmul", frozenset({"fp32_matmul"}), "fp32 (SIMT) GEMM/convolution kernels"),
    Knob("memcpy", frozenset({"memcpy", "pageable_memcpy"}), "every copy and memset"),
)
