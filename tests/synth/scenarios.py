"""The scenarios: one training loop per cause (and the healthy and fixed variants), built with
the model's builder; each returns its intent (what it plants), from which the truth is checked.
"""

from __future__ import annotations

from typing import Any

from .model import (
    BODY_60MS,
    BODY_HEALTHY,
    COPY_DTOH,
    COPY_HTOD,
    COPY_RETURN_NS,
    DATALOADER_MULTI,
    DATALOADER_SINGLE,
    LATENCY_NS,
    LEAD_NS,
    MEM_DEVICE,
    MEM_PAGEABLE,
    MEM_PINNED,
    MS,
    OPTIMIZER_ZERO_GRAD,
    RETURN_NS,
    TAIL_NS,
    TINY_ADD,
    US,
    WAKE_NS,
    Body,
    Builder,
    EventHandle,
    finish,
    item_sync,
    launch_body,
)


def _scn_healthy(b: Builder) -> dict[str, Any]:
    """CPU runs a step ahead (syncs on the previous step's event); GPU never drains."""
    prev: EventHandle | None = None
    for n in range(1, 9):
        with b.step(n):
            with b.cause("data_loading"), b.nvtx_range("data loading"), b.op(DATALOADER_MULTI, "user_annotation"):
                b.advance(150 * US)
            with b.op("aten::to"), b.op("aten::_to_copy"), b.op("aten::copy_"):
                b.memcpy(8 * 1024 * 1024, 500 * US, copy_kind=COPY_HTOD, src=MEM_PINNED, dst=MEM_DEVICE,
                         blocking=False)
            with b.op(OPTIMIZER_ZERO_GRAD, "user_annotation"), b.op("aten::zero_"), b.op("aten::fill_"):
                b.memset(4 * 1024 * 1024, 100 * US)
            launch_body(b, BODY_HEALTHY)
            ev = b.event_record()
            if prev is not None:
                with b.cause("host_device_sync"):
                    b.event_sync(prev)
            prev = ev
    finish(b)
    return {
        "summary": "GPU saturated: kernels back to back, CPU one step ahead (waits on the previous step's "
                   "CUDA event). No idle cause should be reported.",
        "expected_top_cause": None,
        "headline": {"gpu_work_ns_per_step": 50 * MS},
    }


def _scn_dataloader(b: Builder, dl_ns: int, dl_name: str) -> None:
    for n in range(1, 9):
        with b.step(n):
            with b.cause("data_loading"), b.nvtx_range("data loading"), b.op(dl_name, "user_annotation"):
                b.advance(dl_ns)
            launch_body(b, BODY_60MS)
            with b.cause("host_device_sync"):
                item_sync(b)
    finish(b)


def _scn_dataloader_stall(b: Builder) -> dict[str, Any]:
    _scn_dataloader(b, 40 * MS, DATALOADER_SINGLE)
    return {
        "summary": "Single-process DataLoader: each step opens with 40 ms of data loading on the main thread "
                   "while the GPU idles, then 60 ms of kernels launched quickly, then loss.item().",
        "expected_top_cause": "data_loading",
        "headline": {"data_loading_idle_ns_per_step": 40 * MS, "kernel_ns_per_step": 60 * MS},
    }


def _scn_dataloader_fixed(b: Builder) -> dict[str, Any]:
    _scn_dataloader(b, 2 * MS, DATALOADER_MULTI)
    return {
        "summary": "After the fix (num_workers>0): loading is overlapped in worker processes; the main thread "
                   "waits 2 ms per step for the next batch. Same 60 ms of kernels and loss.item().",
        "expected_top_cause": "data_loading",
        "headline": {"data_loading_idle_ns_per_step": 2 * MS, "kernel_ns_per_step": 60 * MS},
    }


def _scn_host_sync(b: Builder) -> dict[str, Any]:
    for n in range(1, 9):
        with b.step(n):
            launch_body(b, BODY_60MS)
            with b.cause("host_device_sync"):
                item_sync(b)
                with b.op("log_metrics", "user_annotation"):
                    b.advance(15 * MS)
    finish(b)
    return {
        "summary": "After each step's kernels, loss.item() (cudaStreamSynchronize) drains the GPU, then 15 ms "
                   "of CPU work (logging) runs before the next launch: ~15 ms GPU idle per step.",
        "expected_top_cause": "host_device_sync",
        "headline": {"host_device_sync_idle_ns_per_step": 15 * MS + POST_DRAIN_NS,
                     "post_sync_cpu_bound_ns_per_step": 15 * MS, "kernel_ns_per_step": 60 * MS},
    }


def _scn_host_sync_fixed(b: Builder) -> dict[str, Any]:
    prev: EventHandle | None = None
    for n in range(1, 9):
        with b.step(n):
            launch_body(b, BODY_60MS)
            with b.op("aten::to"), b.op("aten::_to_copy"), b.op("aten::copy_"):
                b.memcpy(4, 1_500, copy_kind=COPY_DTOH, src=MEM_DEVICE, dst=MEM_PINNED, blocking=False)
            ev = b.event_record()
            if prev is not None:
                with b.cause("host_device_sync"):
                    b.event_sync(prev)
            prev = ev
            with b.cause("cpu_bound"), b.op("log_metrics", "user_annotation"):
                b.advance(15 * MS)
    finish(b)
    return {
        "summary": "After the fix: the loss is copied non_blocking and read one step later (cudaEventSynchronize "
                   "on the previous step's event); the 15 ms of logging overlaps GPU work.",
        "expected_top_cause": None,
        "headline": {"host_device_sync_idle_ns_per_step": 0, "kernel_ns_per_step": 60 * MS},
    }


LAUNCH_BOUND_KERNELS = 400
LAUNCH_BOUND_STEPS = 2


def _scn_launch_bound(b: Builder) -> dict[str, Any]:
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
    finish(b)
    return {
        "summary": f"{LAUNCH_BOUND_KERNELS} tiny kernels (2 µs) per step, one launched every 10 µs: the CPU "
                   "cannot launch fast enough, GPU busy 20%.",
        "expected_top_cause": "launch_bound",
        "headline": {"launch_bound_idle_ns_per_step": LAUNCH_BOUND_KERNELS * 8 * US,
                     "kernel_ns_per_step": LAUNCH_BOUND_KERNELS * 2 * US, "gpu_busy_fraction": 0.2},
    }


PAGEABLE_BYTES = 512 * 1024 * 1024


def _scn_pageable(b: Builder) -> dict[str, Any]:
    for n in range(1, 9):
        with b.step(n):
            with b.cause("pageable_memcpy"), b.op("aten::to"), b.op("aten::_to_copy"), b.op("aten::copy_"):
                b.memcpy(PAGEABLE_BYTES, 25 * MS, copy_kind=COPY_HTOD, src=MEM_PAGEABLE, dst=MEM_DEVICE,
                         blocking=True)
            launch_body(b, BODY_60MS)
            with b.cause("host_device_sync"):
                item_sync(b)
    finish(b)
    return {
        "summary": "Each step starts with a 25 ms host-to-device copy of 512 MiB of pageable memory; "
                   "cudaMemcpyAsync blocks the CPU for the whole copy, so no kernel runs meanwhile.",
        "expected_top_cause": "pageable_memcpy",
        "headline": {"pageable_memcpy_ns_per_step": 25 * MS, "pageable_memcpy_bytes_per_step": PAGEABLE_BYTES,
                     "kernel_ns_per_step": 60 * MS},
    }


ALLREDUCE_COMM_NS = 3 * MS
STRAGGLE_NS = 5 * MS


def scn_multi_rank(b: Builder, rank: int) -> dict[str, Any]:
    # Rank 1 straggles: its last backward kernel runs 5 ms longer, so it reaches the all-reduce 5 ms
    # late. Rank 0's all-reduce kernel starts on time and spins 5 ms waiting; both end together.
    straggler = 1
    extra = STRAGGLE_NS if rank == straggler else 0
    wait = STRAGGLE_NS if rank != straggler else 0
    body = Body(fwd=BODY_60MS.fwd, bwd=(*BODY_60MS.bwd[:-1], BODY_60MS.bwd[-1] + extra), opt=BODY_60MS.opt)
    for n in range(1, 9):
        with b.step(n):
            launch_body(b, body, allreduce=(ALLREDUCE_COMM_NS, wait), world_size=2)
            with b.cause("host_device_sync"):
                item_sync(b)
    finish(b)
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
POST_DRAIN_NS = WAKE_NS + RETURN_NS + TAIL_NS

# Compute idle charged to pageable_memcpy beyond the 25 ms copy: the cpu_op lead-in, the launch
# latency before the DMA starts, the call's return after it, and the op tail.
PAGEABLE_OVERHEAD_NS = LEAD_NS + LATENCY_NS + COPY_RETURN_NS + TAIL_NS

BUILDERS = {
    "healthy": _scn_healthy,
    "dataloader_stall": _scn_dataloader_stall,
    "dataloader_fixed": _scn_dataloader_fixed,
    "host_sync": _scn_host_sync,
    "host_sync_fixed": _scn_host_sync_fixed,
    "launch_bound": _scn_launch_bound,
    "pageable_memcpy": _scn_pageable,
}
