"""How each fix changes the program, and the truth of one fix or of several applied together.

A fix is an edit of the :class:`~.loop.Loop` (the program), never of its trace: its truth is
the edited loop simulated again.  Every edit sets fields of its own or derives them from
fields no other edit sets, so fixes compose: applying a set of them in any order gives the
same loop (:func:`apply_fixes` uses the order of :data:`FIXES`; tests/test_loopsim.py checks
every order of every scenario's fixes).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable

from .loop import Loop
from .sim import simulate


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


def _fix_cuda_graphs(loop: Loop) -> Loop:
    # torch.cuda.graph around forward, backward and optimizer, replayed every step (a model
    # torch.compile already captures keeps its graphs: with the compile fix, this one is moot)
    return dataclasses.replace(loop, cuda_graphs=loop.cuda_graphs or "step")


def _fix_compile(loop: Loop) -> Loop:
    # torch.compile(model, mode="reduce-overhead"): Inductor fuses the elementwise chains, and
    # the forward and backward graphs replay as CUDA graphs; the optimizer stays eager
    return dataclasses.replace(loop, cuda_graphs="compile", fused_elementwise=True)


def _fix_elementwise_transfer(loop: Loop) -> Loop:
    # one transfer of the whole tensor (t.cpu() or t.tolist()), then the loop on the host
    return dataclasses.replace(loop, bulk_read=True)


def _fix_amp(loop: Loop) -> Loop:
    # torch.autocast(dtype=torch.bfloat16): tensor-core GEMMs, elementwise kernels on half the bytes
    return dataclasses.replace(loop, amp=True)


def _fix_fuse(loop: Loop) -> Loop:
    # torch.compile's Inductor fuses each layer's elementwise chain into one kernel
    return dataclasses.replace(loop, fused_elementwise=True)


#: fix → the program edit that makes it; the first seven are the replay's finding kinds
FIXES: dict[str, Callable[[Loop], Loop]] = {
    "data_loading": _fix_data_loading,
    "host_device_sync": _fix_sync,
    "pageable_memcpy": _fix_pageable,
    "launch_bound": _fix_launch,
    "allocator": _fix_allocator,
    "no_tensor_cores": _fix_tensor_cores,
    "cpu_bound": _fix_cpu,
    "cuda_graphs": _fix_cuda_graphs,
    "compile_reduce_overhead": _fix_compile,
    "elementwise_transfer": _fix_elementwise_transfer,
    "amp": _fix_amp,
    "fuse_elementwise": _fix_fuse,
}


def _names(fixes: str | Iterable[str]) -> tuple[str, ...]:
    """One fix or several, in :data:`FIXES` order, each once; an unknown name is an error."""
    names = {fixes} if isinstance(fixes, str) else set(fixes)
    unknown = sorted(names - set(FIXES))
    if unknown:
        raise KeyError(f"unknown fix {', '.join(unknown)} (known: {', '.join(FIXES)})")
    return tuple(k for k in FIXES if k in names)


def apply_fixes(loop: Loop, fixes: str | Iterable[str]) -> Loop:
    """``loop`` with every fix in ``fixes`` applied (one name, or several together)."""
    for name in _names(fixes):
        loop = FIXES[name](loop)
    return loop


def truth(loop: Loop, fix: str | Iterable[str]) -> float:
    """The steady-state step time (ns) of ``loop`` re-simulated with ``fix`` applied (a fix's
    name, or several fixes applied together)."""
    return simulate(apply_fixes(loop, fix)).steady_step_ns


def mean_truth(loop: Loop, fix: str | Iterable[str]) -> float:
    """The mean steady-state step (ns) of ``loop`` re-simulated with ``fix`` applied."""
    return simulate(apply_fixes(loop, fix)).mean_steady_step_ns


def subset_truths(loop: Loop, fixes: Iterable[str], *, mean: bool = False) -> dict[tuple[str, ...], float]:
    """The truth of every subset of ``fixes`` (the empty one: the loop as it is), keyed by the
    subset in :data:`FIXES` order, smallest subsets first: what any plan built from them
    could claim after each of its changes."""
    names = _names(fixes)
    out: dict[tuple[str, ...], float] = {}
    for size in range(len(names) + 1):
        for subset in itertools.combinations(names, size):
            run = simulate(apply_fixes(loop, subset))
            out[subset] = run.mean_steady_step_ns if mean else run.steady_step_ns
    return out
