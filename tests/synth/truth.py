"""Ground truth, computed from the model (unions of intervals, never hand-typed totals), and the
expected files written next to the traces.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .kineto import kineto_event_counts
from .model import BODY_60MS, MEM_PAGEABLE, MS, NCCL_ALLREDUCE, SESSION_EPOCH_NS, US, GpuOp, Scenario, Segment
from .nsight import NSYS_SCHEMA_VERSION, nsys_rows
from .scenarios import (
    ALLREDUCE_COMM_NS,
    LAUNCH_BOUND_KERNELS,
    LAUNCH_BOUND_STEPS,
    PAGEABLE_BYTES,
    PAGEABLE_OVERHEAD_NS,
    POST_DRAIN_NS,
    STRAGGLE_NS,
)


def _union(intervals: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            if e > merged[-1][1]:
                merged[-1] = (merged[-1][0], e)
        else:
            merged.append((s, e))
    return merged


def _clip(intervals: Sequence[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    return [(max(s, lo), min(e, hi)) for s, e in intervals if e > lo and s < hi]


def _complement(busy: Sequence[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    gaps, t = [], lo
    for s, e in busy:
        if s > t:
            gaps.append((t, s))
        t = max(t, e)
    if t < hi:
        gaps.append((t, hi))
    return gaps


def _length(intervals: Sequence[tuple[int, int]]) -> int:
    return sum(e - s for s, e in intervals)


def _attribute(idle: Sequence[tuple[int, int]], segments: Sequence[Segment]) -> dict[str, int]:
    out: Counter[str] = Counter()
    for s, e in idle:
        for seg in segments:
            lo, hi = max(s, seg.start), min(e, seg.end)
            if hi > lo:
                out[seg.cause] += hi - lo
    return dict(sorted(out.items()))


def _window_stats(sc: Scenario, lo: int, hi: int) -> dict[str, Any]:
    gpu = _clip(_union([(o.start, o.end) for o in sc.gpu_ops]), lo, hi)
    kern = _clip(_union([(o.start, o.end) for o in sc.gpu_ops if o.kind == "kernel"]), lo, hi)
    idle = _complement(gpu, lo, hi)
    cidle = _complement(kern, lo, hi)
    by_cause, cby_cause = _attribute(idle, sc.segments), _attribute(cidle, sc.segments)
    assert sum(by_cause.values()) == _length(idle), "cause labels must tile the window"
    assert sum(cby_cause.values()) == _length(cidle), "cause labels must tile the window"
    return {
        "gpu_busy_ns": _length(gpu),
        "gpu_idle_ns": _length(idle),
        "idle_by_cause": by_cause,
        "kernel_busy_ns": _length(kern),
        "compute_idle_ns": _length(cidle),
        "compute_idle_by_cause": cby_cause,
    }


def _per_kind(ops: Sequence[GpuOp]) -> dict[str, Any]:
    return {"count": len(ops), "time_sum_ns": sum(o.dur for o in ops), "bytes": sum(o.nbytes for o in ops)}


def _rank_causes(by_cause: dict[str, int]) -> list[str]:
    return [c for c, ns in sorted(by_cause.items(), key=lambda kv: (-kv[1], kv[0])) if ns > 0]


def compute_truth(sc: Scenario, intent: dict[str, Any]) -> dict[str, Any]:
    per_step = []
    for st in sc.steps:
        row: dict[str, Any] = {"step": st.number, "start_ns": st.start, "end_ns": st.end,
                               "duration_ns": st.end - st.start}
        row.update(_window_stats(sc, st.start, st.end))
        per_step.append(row)
    window = sum(r["duration_ns"] for r in per_step)
    tot: dict[str, Any] = {"window_ns": window}
    for key in ("gpu_busy_ns", "gpu_idle_ns", "kernel_busy_ns", "compute_idle_ns"):
        tot[key] = sum(r[key] for r in per_step)
    for key in ("idle_by_cause", "compute_idle_by_cause"):
        acc: Counter[str] = Counter()
        for r in per_step:
            acc.update(r[key])
        tot[key] = dict(sorted(acc.items()))
    tot["gpu_busy_fraction"] = round(tot["gpu_busy_ns"] / window, 6)
    tot["kernel_busy_fraction"] = round(tot["kernel_busy_ns"] / window, 6)

    kernels = [o for o in sc.gpu_ops if o.kind == "kernel"]
    memcpys = [o for o in sc.gpu_ops if o.kind == "memcpy"]
    memsets = [o for o in sc.gpu_ops if o.kind == "memset"]
    by_copy: dict[str, list[GpuOp]] = {}
    for o in memcpys:
        by_copy.setdefault(o.name, []).append(o)
    by_kernel: dict[str, list[GpuOp]] = {}
    for o in kernels:
        by_kernel.setdefault(o.kernel.short if o.kernel else o.name, []).append(o)

    kineto_counts = kineto_event_counts(sc)
    nsys_counts = {table: len(rows) for table, (_cols, rows) in nsys_rows(sc).items()}
    ranking = _rank_causes(tot["compute_idle_by_cause"])
    expected = intent["expected_top_cause"]
    return {
        "scenario": sc.name,
        "file_stem": sc.stem,
        "summary": intent["summary"],
        "expected_top_cause": expected,
        "cause_ranking_by_compute_idle": ranking,
        "cause_ranking_by_gpu_idle": _rank_causes(tot["idle_by_cause"]),
        "headline": intent["headline"],
        "process": {"pid": sc.pid, "main_tid": sc.tid, "device": sc.device, "stream": sc.stream,
                    "rank": sc.rank, "world_size": sc.world_size},
        "time_base": {"unit": "ns", "session_epoch_ns": SESSION_EPOCH_NS,
                      "kineto_baseTimeNanoseconds": SESSION_EPOCH_NS, "nsys_utcEpochNs": SESSION_EPOCH_NS,
                      "note": "times below are session ns == nsys start/end; Kineto ts (µs) * 1000 == same ns"},
        "steps": {"count": len(sc.steps), "numbers": [s.number for s in sc.steps],
                  "first_start_ns": sc.steps[0].start, "last_end_ns": sc.steps[-1].end},
        "per_step": per_step,
        "totals": tot,
        "kernels": {"count": len(kernels), "time_sum_ns": sum(o.dur for o in kernels),
                    "by_short_name": {k: _per_kind(v) for k, v in sorted(by_kernel.items())}},
        "memcpy": dict(_per_kind(memcpys), by_name={k: _per_kind(v) for k, v in sorted(by_copy.items())}),
        "memset": _per_kind(memsets),
        "sync": {"count": len(sc.syncs), "by_kind": dict(sorted(Counter(s.kind for s in sc.syncs).items())),
                 "blocking_api_ns": sum(r.end - r.start for r in sc.runtime if r.name in _SYNC_APIS)},
        "runtime": {"count": len(sc.runtime), "by_name": dict(sorted(Counter(r.name for r in sc.runtime).items()))},
        "kineto": {"file": f"{sc.stem}.kineto.json", "event_counts": kineto_counts},
        "nsys": {"file": f"{sc.stem}.nsys.sqlite", "schema_version": NSYS_SCHEMA_VERSION,
                 "row_counts": nsys_counts},
        "definitions": _DEFINITIONS,
    }


_SYNC_APIS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")

_DEFINITIONS = {
    "step_window": "[start_ns, end_ns) of ProfilerStep#N (Kineto) == NVTX 'step N' (Nsight), CPU side",
    "gpu_busy_ns": "union of kernel, memcpy and memset intervals on the device, clipped to the window",
    "kernel_busy_ns": "union of kernel intervals only, clipped to the window",
    "gpu_idle_ns": "window minus gpu_busy_ns; compute_idle_ns: window minus kernel_busy_ns",
    "idle_by_cause": "each idle ns charged to the cause label of the main-thread stretch it falls in: "
                     "data_loading (DataLoader __next__), host_device_sync (blocked in a sync API, and "
                     "CPU work that runs after a sync drained the GPU), launch_bound (issuing launches), "
                     "pageable_memcpy (blocked in a pageable cudaMemcpyAsync), cpu_bound (other CPU work)",
    "expected_top_cause": "first cause by compute_idle_by_cause totals; null means no cause should be reported",
}


def check_obvious(sc: Scenario) -> None:
    """The numbers a reader can see in the scenario description must come out of the model."""
    t, steps = sc.truth, sc.truth["per_step"]
    expected = t["expected_top_cause"]
    if expected is not None:
        assert t["cause_ranking_by_compute_idle"][0] == expected, (sc.name, t["cause_ranking_by_compute_idle"])
    for r in steps:
        cidle = r["compute_idle_by_cause"]
        if sc.name == "healthy":
            if r["step"] > 1:
                assert r["gpu_busy_ns"] == r["duration_ns"], "healthy GPU must never idle after step 1"
        elif sc.name in ("dataloader_stall", "dataloader_fixed"):
            dl = 40 * MS if sc.name == "dataloader_stall" else 2 * MS
            assert r["idle_by_cause"]["data_loading"] == dl
            assert cidle["data_loading"] == dl
            assert r["kernel_busy_ns"] == BODY_60MS.kernel_ns == 60 * MS
        elif sc.name == "host_sync":
            assert r["idle_by_cause"]["host_device_sync"] == 15 * MS + POST_DRAIN_NS
            assert r["kernel_busy_ns"] == 60 * MS
        elif sc.name == "host_sync_fixed":
            assert r["step"] == 1 or r["gpu_busy_ns"] == r["duration_ns"]
            assert "host_device_sync" not in r["idle_by_cause"]
        elif sc.name == "launch_bound":
            assert r["kernel_busy_ns"] == r["gpu_busy_ns"] == LAUNCH_BOUND_KERNELS * 2 * US == 800 * US
            assert r["duration_ns"] == LAUNCH_BOUND_KERNELS * 10 * US == 4 * MS
            assert r["idle_by_cause"] == {"launch_bound": 3_200 * US}
        elif sc.name == "pageable_memcpy":
            pageable = [o for o in sc.gpu_ops if o.src_kind == MEM_PAGEABLE and o.kind == "memcpy"
                        and r["start_ns"] <= o.start < r["end_ns"]]
            assert [o.dur for o in pageable] == [25 * MS]
            assert pageable[0].nbytes == PAGEABLE_BYTES
            assert cidle["pageable_memcpy"] == 25 * MS + PAGEABLE_OVERHEAD_NS
            assert r["kernel_busy_ns"] == 60 * MS
    if sc.name == "healthy":
        assert sum(o.dur for o in sc.gpu_ops) == len(steps) * 50 * MS, "50 ms of GPU work per step"
        assert t["totals"]["gpu_busy_fraction"] >= 0.97
        assert len(steps) == 8
    elif sc.name == "launch_bound":
        assert t["totals"]["gpu_busy_fraction"] == 0.2
        assert t["kernels"]["count"] == LAUNCH_BOUND_KERNELS * LAUNCH_BOUND_STEPS
    else:
        assert len(steps) == 8


def check_multi_rank(ranks: Sequence[Scenario]) -> None:
    assert [r.rank for r in ranks] == [0, 1]
    ar = [[o for o in r.gpu_ops if o.kernel is NCCL_ALLREDUCE] for r in ranks]
    assert len(ar[0]) == len(ar[1]) == 8
    for a0, a1 in zip(ar[0], ar[1], strict=True):
        assert a0.end == a1.end, "a collective ends at the same instant on every rank"
        assert a0.dur == ALLREDUCE_COMM_NS + STRAGGLE_NS
        assert a1.dur == ALLREDUCE_COMM_NS
        assert a1.start - a0.start == STRAGGLE_NS
    assert [(s.start, s.end) for s in ranks[0].steps] == [(s.start, s.end) for s in ranks[1].steps]



def expected_json(sc: Scenario) -> str:
    return json.dumps(sc.truth, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_expected(sc: Scenario, path: str | os.PathLike[str]) -> Path:
    p = Path(path)
    p.write_text(expected_json(sc), encoding="utf-8", newline="\n")
    return p
