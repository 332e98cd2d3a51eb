"""The findings of a captured program, told in terms of what the program built.

``tracekit capture`` records what the program constructed (:mod:`tracekit.reading.program`:
its DataLoaders with their arguments and the line that built each, its optimizers, autocast,
``torch.compile`` and CUDA-graph use, the math flags, the device memory).  The pipeline hands
those facts in as a :class:`~tracekit.reading.program.ProgramFacts` record; this module reads
nothing else:

* the data-loading finding names the training loop's DataLoader, where it was built and the
  arguments to change (``train.py:42 `DataLoader(batch_size=64, num_workers=0,
  pin_memory=False)`: set num_workers=4, pin_memory=True``), and is located there;
* mixed-precision advice is reworded when autocast is already on, TF32 advice left out when
  TF32 is already enabled, compile / CUDA-graph advice reworded when the program already uses it;
* the batch-size advice states the device memory the program never used
  (:func:`memory_from_program` gives the headroom to the detector when the trace has none).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..reading.program import CodeSite, CompileUse, DataLoaderInfo, ProgramFacts
from .codeloc import CodeLocation, LineSource
from .findings import Finding
from .memory import MemoryHeadroom

#: workers suggested for a single-process DataLoader (the fix text says to tune it to the CPU cores per GPU)
SUGGESTED_WORKERS = 4

_AMP_KINDS = ("no_tensor_cores", "fp32_gemm")
_LAUNCH_KINDS = ("launch_bound", "small_batch")


def memory_from_program(program: ProgramFacts | None) -> tuple[MemoryHeadroom, ...]:
    """The device memory the capture measured, as the memory analysis states it (empty when unknown)."""
    mem = None if program is None else program.memory
    if mem is None or mem.total_bytes is None or mem.peak_reserved_bytes is None:
        return ()
    return (MemoryHeadroom(
        device=mem.device or 0, total_bytes=mem.total_bytes, peak_allocated_bytes=mem.peak_allocated_bytes,
        peak_reserved_bytes=mem.peak_reserved_bytes,
    ),)


def loader_changes(loader: DataLoaderInfo, *, host_only: bool) -> list[str]:
    """The DataLoader arguments to change, as ``name=value`` (empty: nothing to change)."""
    changes: list[str] = []
    workers = loader.num_workers
    if workers == 0:
        changes.append(f"num_workers={SUGGESTED_WORKERS}")
    elif workers:
        changes.append(f"num_workers={2 * workers}")
    if loader.pin_memory is False and not host_only:
        changes.append("pin_memory=True")
    if loader.persistent_workers is False and loader.iterations > 1:
        changes.append("persistent_workers=True")
    return changes


def loader_fix(loader: DataLoaderInfo, *, host_only: bool) -> str | None:
    """The data-loading fix for this DataLoader (None when its arguments leave nothing to change)."""
    changes = loader_changes(loader, host_only=host_only)
    if not changes:
        return None
    where = "onto the GPU or into the workers" if not host_only else "into the workers"
    return (
        f"{loader.describe()}: set {', '.join(changes)} (then tune num_workers to the CPU cores per "
        f"{'process' if host_only else 'GPU'}); move slow preprocessing (decode, augment) {where}; cache decoded samples."
    )


def _site_location(site: CodeSite | None, count: int, code: LineSource | None) -> CodeLocation | None:
    if site is None or site.line is None:
        return None
    text = None if code is None else code(site.file, site.line)
    return CodeLocation(file=site.file, line=site.line, function=site.function, code=text, count=count)


def _compiled(program: ProgramFacts) -> CompileUse | None:
    return next((c for c in program.compiles if c.calls and c.disable is not True), None)


def _amp_fix(f: Finding, program: ProgramFacts) -> str:
    tf32 = program.math is not None and program.math.tf32_matmul is True
    if program.uses_autocast:
        dtypes = sorted({a.dtype for a in program.autocast if a.dtype and a.entered})
        said = f" ({', '.join(dtypes)})" if dtypes else ""
        rest = "" if tf32 else "; for the fp32 ones that must stay, enable TF32 with torch.set_float32_matmul_precision('high')"
        return (
            f"Autocast is already on{said}, yet these matrix multiplies run in fp32: run them inside the autocast "
            f"region (forward pass and loss) and do not cast their inputs back to float32{rest}."
        )
    if tf32:
        return (
            "TF32 is already enabled; use mixed precision for the rest of the speed-up: "
            "torch.autocast(device_type='cuda', dtype=torch.bfloat16) for the forward pass (float16 needs a GradScaler)."
        )
    return f.fix


def _launch_fix(f: Finding, program: ProgramFacts) -> str:
    compiled = _compiled(program)
    fix = f.fix
    if program.uses_cuda_graphs:
        where = f" ({compiled.site})" if compiled is not None and compiled.site is not None else ""
        fix = (
            f"The program already uses CUDA graphs{where}, yet kernels still launch one by one: look for the work outside "
            "the graphs (graph breaks: TORCH_LOGS=graph_breaks; the optimizer, the loss, metrics), and give the GPU more "
            "work per launch (a larger batch, fused optimizers: foreach=True / fused=True)."
        )
    elif compiled is not None:
        where = f" at {compiled.site}" if compiled.site is not None else ""
        fix = (
            f"torch.compile is already used{where} (mode={compiled.mode or 'default'}): add CUDA graphs with "
            "mode='reduce-overhead', check for graph breaks (TORCH_LOGS=graph_breaks), and give the GPU more work per "
            "launch (a larger batch, fused optimizers: foreach=True / fused=True)."
        )
    mem = program.memory
    if mem is not None and mem.headroom_bytes is not None and mem.total_bytes:
        fix += (
            f" The device had {mem.headroom_bytes / 2**30:,.1f} GiB of {mem.total_bytes / 2**30:,.1f} GiB unused at the "
            f"peak ({100 * (mem.headroom or 0.0):.0f}%): room for a larger batch."
        )
    return fix


def _fusion_fix(f: Finding, program: ProgramFacts) -> str:
    compiled = _compiled(program)
    if compiled is None:
        return f.fix
    where = f" at {compiled.site}" if compiled.site is not None else ""
    return (
        f"torch.compile is already used{where}, yet these chains run unfused: they are outside the compiled region "
        "(graph breaks: TORCH_LOGS=graph_breaks, or code that is not compiled); use fused optimizers (fused=True / "
        "foreach=True) and fused layers (F.scaled_dot_product_attention) there."
    )


def advise(
    findings: Sequence[Finding], program: ProgramFacts | None, *, host_only: bool, data_points: int = 0,
    code: LineSource | None = None,
) -> list[Finding]:
    """``findings`` with the fixes and locations the program's facts make precise (as they are
    without facts).  ``data_points``: the DataLoader fetches the trace recorded in its steps
    (the count at the loader's location)."""
    if program is None:
        return list(findings)
    out = []
    for f in findings:
        if f.kind == "data_loading":
            loader = program.training_loader()
            if loader is not None:
                fix = loader_fix(loader, host_only=host_only) or f.fix
                located = _site_location(loader.site, data_points or loader.fetches, code)
                f = dataclasses.replace(f, fix=fix, location=located or f.location)
        elif f.kind in _AMP_KINDS:
            f = dataclasses.replace(f, fix=_amp_fix(f, program))
        elif f.kind in _LAUNCH_KINDS:
            f = dataclasses.replace(f, fix=_launch_fix(f, program))
        elif f.kind == "unfused_elementwise":
            f = dataclasses.replace(f, fix=_fusion_fix(f, program))
        out.append(f)
    return out


__all__ = ["SUGGESTED_WORKERS", "advise", "loader_changes", "loader_fix", "memory_from_program"]
