""""""

from __future__ import annotations

import os
from pathlib import Path

from .kineto import kineto_json, write_kineto
from .model import (
    BODY_60MS,
    BODY_HEALTHY,
    CAUSES,
    COPY_DTOH,
    COPY_HTOD,
    DATALOADER_MULTI,
    DATALOADER_SINGLE,
    DIFF_PAIRS,
    FIRST_STEP_NS,
    MAIN_PID,
    MEM_DEVICE,
    MEM_PAGEABLE,
    MEM_PINNED,
    PROFILER_MARGIN_NS,
    SCENARIO_NAMES,
    SESSION_EPOCH_NS,
    STREAM,
    Builder,
    Scenario,
    finish,
    item_sync,
    launch_body,
)
from .nsight import nsys_rows, write_nsys
from .scenarios import BUILDERS, scn_multi_rank
from .truth import check_multi_rank, check_obvious, compute_truth, expected_json, write_expected


def build(name: str, rank: int = 0) -> Scenario:
    """Build one scenario (``rank`` only matters for ``multi_rank``: 0 or 1)."""
    if name not in SCENARIO_NAMES:
        raise ValueError(f"unknown scenario {name!r}; choose from {', '.join(SCENARIO_NAMES)}")
    multi = name == "multi_rank"
    if not multi and rank != 0:
        raise ValueError(f"scenario {name!r} has a single rank")
    if multi and rank not in (0, 1):
        raise ValueError("multi_rank has ranks 0 and 1")
    b = Builder(pid=MAIN_PID + rank, device=rank if multi else 0)
    intent = scn_multi_rank(b, rank) if multi else BUILDERS[name](b)
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
    sc.truth = compute_truth(sc, intent)
    check_obvious(sc)
    return sc


def build_all() -> list[Scenario]:
    """Every scenario in SCENARIO_NAMES order; multi_rank contributes rank 0 then rank 1."""
    out: list[Scenario] = []
    for name in SCENARIO_NAMES:
        ranks = (0, 1) if name == "multi_rank" else (0,)
        out.extend(build(name, r) for r in ranks)
    check_multi_rank([s for s in out if s.name == "multi_rank"])
    return out



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


__all__ = [
    "BODY_60MS",
    "BODY_HEALTHY",
    "CAUSES",
    "COPY_DTOH",
    "COPY_HTOD",
    "DATALOADER_MULTI",
    "DATALOADER_SINGLE",
    "DIFF_PAIRS",
    "FIRST_STEP_NS",
    "MAIN_PID",
    "MEM_DEVICE",
    "MEM_PAGEABLE",
    "MEM_PINNED",
    "PROFILER_MARGIN_NS",
    "SCENARIO_NAMES",
    "SESSION_EPOCH_NS",
    "STREAM",
    "Builder",
    "Scenario",
    "build",
    "build_all",
    "expected_json",
    "finish",
    "item_sync",
    "kineto_json",
    "launch_body",
    "nsys_rows",
    "write_all",
    "write_expected",
    "write_kineto",
    "write_nsys",
]
