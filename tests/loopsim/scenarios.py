"""The simulated scenarios: loops with something planted, the fixes that apply, and controls.

* :data:`SCENARIOS` and :data:`INTERMITTENT`: one-thread loops whose traces and truths the
  replay tests hold fixed (tests/test_replay.py, test_sweep.py, test_job_replay.py).
* :data:`BEHAVIOURS`: loops with a behaviour of real PyTorch the first model lacked (the
  autograd device thread, CUDA graphs, element-wise transfers, the pin-memory thread, the
  workers' hand-off), each with the single fixes that apply.
* :data:`PLANS`: loops where several fixes interact, for plans that apply them together
  (:func:`~.fixes.subset_truths`), and healthy controls where a plan must be empty.
"""

from __future__ import annotations

from .loop import RESNET50_HANDOFF_NS, RESNET50_HANDOFF_NS_PER_BYTE, Loop

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

#: a DataLoader as real PyTorch runs it with workers: the pin-memory thread, and the hand-off
#: measured on the real ResNet-50 pair (tests/loopsim/loop.py)
_REAL_LOADER: dict[str, object] = {"pin_thread": True, "handoff_ns": RESNET50_HANDOFF_NS, "handoff_ns_per_byte": RESNET50_HANDOFF_NS_PER_BYTE}


def _loop(name: str, **fields: object) -> Loop:
    """A loop with the backward on the autograd thread and the real loader's costs."""
    return Loop(name, **{"backward_thread": True, **_REAL_LOADER, **fields})  # type: ignore[arg-type]


#: scenario name → (the loop, the single fixes that apply to it)
BEHAVIOURS: dict[str, tuple[Loop, tuple[str, ...]]] = {
    # about 2,000 tiny kernels a step (forward on the main thread, backward on the autograd
    # thread), the GPU busy 19% of a 43 ms step; CUDA graphs take it to about 10 ms
    "graphs_launch_bound": (
        _loop("graphs_launch_bound", num_workers=4, load_ns=5_000_000, pinned=True, non_blocking=True, batch_bytes=1 << 20, layers=220,
              gemm_ns=6_000, elementwise_ns=3_000, dispatch_ns=12_000, launch_ns=5_000, python_ns=3_000, optimizer_ns=20_000, steps=8,
              step_sync="item"),
        ("cuda_graphs", "compile_reduce_overhead"),
    ),
    # a function (no step markers) that computes on the GPU, then reads the result element by
    # element: 4,096 copies of 4 bytes, each with its cudaStreamSynchronize
    "elementwise_reads": (
        _loop("elementwise_reads", train=False, step_markers=False, batches=False, steps=6, layers=12, gemm_ns=1_600_000,
              elementwise_ns=150_000, dispatch_ns=7_000, launch_ns=5_000, python_ns=2_500, elementwise_reads=4096),
        ("elementwise_transfer",),
    ),
    # a training loop whose metrics read 512 elements with .item() every step
    "elementwise_items": (
        _loop("elementwise_items", num_workers=4, load_ns=10_000_000, pinned=True, non_blocking=True, layers=8, gemm_ns=1_500_000,
              elementwise_reads=512, read_via="item", step_sync="item"),
        ("elementwise_transfer",),
    ),
    # sync_prevents_overlap with the backward on the autograd thread
    "autograd_sync": (
        _loop("autograd_sync", load_ns=30_000_000, layers=10, gemm_ns=3_000_000, elementwise_ns=500_000, step_sync="item",
              batch_bytes=16 << 20, pinned=True, non_blocking=True),
        ("host_device_sync", "data_loading"),
    ),
    # shaped like the real ResNet-50 pair (../shared/traces/kineto/tb_plugin_pair): 43 ms of
    # loading on the main thread, a pageable 19.3 MB copy, about 101 ms of GPU work and 105 ms
    # of host work a step; with workers each batch's hand-off costs the main thread 1.4 ms
    "resnet50_loader": (
        _loop("resnet50_loader", steps=8, load_ns=43_000_000, batch_bytes=19_267_840, pageable_bw=9.9, layers=53, gemm_ns=480_000,
              elementwise_ns=60_000, dispatch_ns=90_000, python_ns=50_000, launch_ns=8_000, autograd_node_ns=12_000,
              optimizer_kernels=320, optimizer_ns=15_000),
        ("data_loading",),
    ),
    # workers and a big pageable copy; pinned, the pin-memory thread (off the main thread) is
    # slower than the GPU's step
    "pageable_workers": (
        _loop("pageable_workers", num_workers=4, load_ns=20_000_000, batch_bytes=640 << 20, layers=8, gemm_ns=1_500_000, step_sync="item"),
        ("pageable_memcpy",),
    ),
    # fp32 GEMMs on a GPU with tensor cores (record_shapes, so the efficiency analysis sees them)
    "fp32_gemms": (
        _loop("fp32_gemms", num_workers=4, load_ns=10_000_000, pinned=True, non_blocking=True, layers=10, gemm_ns=3_000_000,
              elementwise_per_layer=1, elementwise_ns=500_000, record_shapes=True, gemm_mnk=(8192, 8192, 4096), step_sync="item"),
        ("no_tensor_cores", "amp"),
    ),
    # six unfused elementwise ops after every GEMM, under AMP
    "unfused_chain": (
        _loop("unfused_chain", num_workers=4, load_ns=10_000_000, pinned=True, non_blocking=True, layers=12, gemm_ns=1_200_000,
              elementwise_per_layer=6, elementwise_ns=300_000, amp=True, record_shapes=True, gemm_mnk=(8192, 4096, 4096), step_sync="item"),
        ("fuse_elementwise",),
    ),
}

#: scenario name → (the loop, the fixes a plan may combine); healthy controls have none
PLANS: dict[str, tuple[Loop, tuple[str, ...]]] = {
    # loading on the main thread hides fp32 GEMMs: data loading alone takes the step from
    # 61.6 to 48.4 ms, TF32 alone saves nothing, both give 28.8 ms (AMP instead: 22.3 ms)
    "data_fp32": (
        _loop("data_fp32", load_ns=56_300_000, pinned=True, non_blocking=True, batch_bytes=24 << 20, layers=8, gemm_ns=1_300_000,
              elementwise_ns=320_000, record_shapes=True, gemm_mnk=(8192, 4096, 4096)),
        ("data_loading", "no_tensor_cores", "amp"),
    ),
    # loading on the main thread, then loss.item(): either fix lets loading overlap the GPU
    "sync_loader": (
        _loop("sync_loader", load_ns=45_000_000, pinned=True, non_blocking=True, batch_bytes=16 << 20, layers=10, gemm_ns=1_000_000,
              elementwise_ns=250_000, step_sync="item"),
        ("host_device_sync", "data_loading"),
    ),
    # pinning on the main thread costs more than the pageable copy it replaces: pinned memory
    # pays only with workers (the pin-memory thread)
    "pageable_loader_sync": (
        _loop("pageable_loader_sync", load_ns=25_000_000, batch_bytes=256 << 20, layers=10, gemm_ns=1_500_000, elementwise_ns=300_000,
              step_sync="item"),
        ("pageable_memcpy", "data_loading", "host_device_sync"),
    ),
    # tiny kernels and an .item() after every layer: the syncs cut the graphs into pieces
    "launch_sync": (
        _loop("launch_sync", num_workers=4, load_ns=5_000_000, pinned=True, non_blocking=True, batch_bytes=1 << 20, layers=120,
              gemm_ns=8_000, elementwise_ns=4_000, dispatch_ns=12_000, launch_ns=5_000, python_ns=3_000, item_per_layer=True,
              optimizer_ns=20_000, steps=8, step_sync="item"),
        ("cuda_graphs", "host_device_sync"),
    ),
    # cudaMalloc churn and an .item() after every layer: without the syncs the host runs
    # ahead and the allocations hide behind the GPU's work
    "allocator_sync": (
        _loop("allocator_sync", num_workers=4, load_ns=10_000_000, pinned=True, non_blocking=True, layers=10, gemm_ns=1_200_000,
              mallocs_per_step=40, malloc_ns=250_000, item_per_layer=True),
        ("allocator", "host_device_sync"),
    ),
    # GPU-bound, AMP, compiled (fused elementwise chains), workers, pinned: nothing to fix
    "healthy_threaded": (
        _loop("healthy_threaded", num_workers=4, load_ns=10_000_000, pinned=True, non_blocking=True, layers=12, gemm_ns=2_000_000,
              elementwise_ns=400_000, amp=True, fused_elementwise=True, record_shapes=True, step_sync="item"),
        (),
    ),
    # small kernels, already compiled with mode="reduce-overhead", and GPU-bound
    "healthy_graphs": (
        _loop("healthy_graphs", num_workers=4, load_ns=3_000_000, pinned=True, non_blocking=True, batch_bytes=4 << 20, layers=60,
              gemm_ns=120_000, elementwise_ns=40_000, amp=True, dispatch_ns=12_000, launch_ns=5_000, cuda_graphs="compile",
              fused_elementwise=True, step_sync="item"),
        (),
    ),
}
