"""The Kineto writer: a scenario as a PyTorch-profiler Chrome trace (``<stem>.kineto.json``).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from .model import (
    CONTEXT,
    GPU_NAME,
    GPU_NUM_SMS,
    GPU_TOTAL_MEM,
    RUNTIME_API,
    SESSION_EPOCH_NS,
    STREAM,
    GpuOp,
    Scenario,
    SyncOp,
)


class _Us:
    """A nanosecond time printed the way Kineto prints µs: integer part, '.', 3 digits."""

    __slots__ = ("ns",)

    def __init__(self, ns: int) -> None:
        self.ns = ns

    def __str__(self) -> str:
        return f"{self.ns // 1000}.{self.ns % 1000:03d}"


def _dump(value: Any) -> str:
    if isinstance(value, _Us):
        return str(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{_dump(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_dump(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def _device_properties(n_devices: int) -> list[dict[str, Any]]:
    return [
        {"id": i, "name": GPU_NAME, "totalGlobalMem": GPU_TOTAL_MEM, "computeMajor": 9, "computeMinor": 0,
         "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 32,
         "sharedMemPerBlock": 49152, "numSms": GPU_NUM_SMS, "regsPerMultiprocessor": 65536,
         "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472}
        for i in range(n_devices)
    ]


def _kernel_args(o: GpuOp) -> dict[str, Any]:
    k = o.kernel
    assert k is not None
    blocks = k.grid[0] * k.grid[1] * k.grid[2]
    warps_per_block = -(-(k.block[0] * k.block[1] * k.block[2]) // 32)
    args: dict[str, Any] = {}
    if o.ext_id is not None:
        args["External id"] = o.ext_id
    args.update({
        "queued": 0, "device": o.device, "context": CONTEXT, "stream": o.stream, "correlation": o.correlation,
        "registers per thread": k.registers, "shared memory": k.shared_mem,
        "blocks per SM": round(blocks / GPU_NUM_SMS, 6),
        "warps per SM": round(blocks * warps_per_block / GPU_NUM_SMS, 6),
        "grid": list(k.grid), "block": list(k.block), "est. achieved occupancy %": k.occupancy,
    })
    args.update(o.extra_args)
    return args


def _gpu_event(o: GpuOp) -> dict[str, Any]:
    cat = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}[o.kind]
    if o.kind == "kernel":
        args = _kernel_args(o)
    else:
        args = {"External id": o.ext_id} if o.ext_id is not None else {}
        args.update({"device": o.device, "context": CONTEXT, "stream": o.stream, "correlation": o.correlation,
                     "bytes": o.nbytes, "memory bandwidth (GB/s)": round(o.nbytes / o.dur, 6)})
    return {"ph": "X", "cat": cat, "name": o.name, "pid": o.device, "tid": o.stream, "ts": _Us(o.start),
            "dur": _Us(o.dur), "args": args}


def _sync_tid(s: SyncOp) -> int:
    return s.stream if s.stream is not None else -1


def _sync_event(s: SyncOp) -> dict[str, Any]:
    args: dict[str, Any] = {"External id": s.ext_id} if s.ext_id is not None else {}
    args["cuda_sync_kind"] = s.kind
    if s.kind == "Event Sync":
        args.update({"wait_on_stream": STREAM, "wait_on_cuda_event_record_corr_id": s.event_record_corr,
                     "wait_on_cuda_event_id": s.event_id})
    args.update({"stream": s.stream if s.stream is not None else -1, "correlation": s.correlation,
                 "device": s.device, "context": CONTEXT})
    return {"ph": "X", "cat": "cuda_sync", "name": s.kind, "pid": s.device, "tid": _sync_tid(s),
            "ts": _Us(s.start), "dur": _Us(s.end - s.start), "args": args}


def _flow(ph: str, corr: int, pid: int, tid: int, ts: int) -> dict[str, Any]:
    ev = {"ph": ph, "id": corr, "pid": pid, "tid": tid, "ts": _Us(ts), "cat": "ac2g", "name": "ac2g"}
    if ph == "f":
        ev["bp"] = "e"
    return ev


def _metadata_events(sc: Scenario) -> list[dict[str, Any]]:
    ts = _Us(sc.profiler_start)
    out: list[dict[str, Any]] = []

    def meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> None:
        out.append({"name": name, "ph": "M", "ts": ts, "pid": pid, "tid": tid, "args": args})

    meta("process_name", sc.pid, 0, {"name": "python3"})
    meta("process_labels", sc.pid, 0, {"labels": "CPU"})
    meta("process_sort_index", sc.pid, 0, {"sort_index": sc.pid})
    meta("process_name", sc.device, 0, {"name": "python3"})
    meta("process_labels", sc.device, 0, {"labels": f"GPU {sc.device}"})
    meta("process_sort_index", sc.device, 0, {"sort_index": 5000000 + sc.device})
    meta("thread_name", sc.pid, sc.tid, {"name": f"thread {sc.tid} (python3)"})
    meta("thread_sort_index", sc.pid, sc.tid, {"sort_index": sc.tid})
    meta("thread_name", sc.device, sc.stream, {"name": f"stream {sc.stream} "})
    meta("thread_sort_index", sc.device, sc.stream, {"sort_index": sc.stream})
    if any(s.stream is None for s in sc.syncs):
        meta("thread_name", sc.device, -1, {"name": f"Device {sc.device}"})
        meta("thread_sort_index", sc.device, -1, {"sort_index": -1})
    return out


def _distributed_info(sc: Scenario) -> dict[str, Any]:
    ranks = list(range(sc.world_size))
    return {"backend": "nccl", "rank": sc.rank, "world_size": sc.world_size, "pg_count": 1,
            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                           "pg_size": sc.world_size, "ranks": ranks}],
            "nccl_version": "2.21.5"}


def _kineto_events(sc: Scenario) -> list[dict[str, Any]]:
    """traceEvents in Kineto's order: CPU side, GPU side, metadata, then the window markers."""
    cpu: list[tuple[int, int, dict[str, Any]]] = []
    for idx, o in enumerate(sc.cpu_ops):
        args = {"External id": o.ext_id, "Record function id": 0}
        args.update(o.args)
        args["Ev Idx"] = idx
        cpu.append((o.start, 0, {"ph": "X", "cat": o.cat, "name": o.name, "pid": sc.pid, "tid": o.tid,
                                 "ts": _Us(o.start), "dur": _Us(o.end - o.start), "args": args}))
    linked = {o.correlation for o in sc.gpu_ops} | {s.correlation for s in sc.syncs}
    for r in sc.runtime:
        args = {"External id": r.ext_id} if r.ext_id is not None else {}
        args.update({"cbid": RUNTIME_API[r.name][0], "correlation": r.correlation})
        cpu.append((r.start, 1, {"ph": "X", "cat": "cuda_runtime", "name": r.name, "pid": sc.pid, "tid": r.tid,
                                 "ts": _Us(r.start), "dur": _Us(r.end - r.start), "args": args}))
        if r.correlation in linked:
            cpu.append((r.start, 2, _flow("s", r.correlation, sc.pid, r.tid, r.start)))
    gpu: list[tuple[int, int, dict[str, Any]]] = []
    for g in sc.gpu_ops:
        gpu.append((g.start, 0, _gpu_event(g)))
        gpu.append((g.start, 1, _flow("f", g.correlation, g.device, g.stream, g.start)))
    for s in sc.syncs:
        gpu.append((s.start, 0, _sync_event(s)))
        gpu.append((s.start, 1, _flow("f", s.correlation, s.device, _sync_tid(s), s.start)))
    # Stable sorts keep the builder's order among equal keys (deterministic).
    events = [e for _t, _k, e in sorted(cpu, key=lambda x: (x[0], x[1]))]
    events += [e for _t, _k, e in sorted(gpu, key=lambda x: (x[0], x[1]))]
    events += _metadata_events(sc)
    events.append({"ph": "X", "cat": "Trace", "ts": _Us(sc.profiler_start),
                   "dur": _Us(sc.profiler_end - sc.profiler_start), "pid": "Spans", "tid": "PyTorch Profiler",
                   "name": "PyTorch Profiler (0)", "args": {"Op count": 0}})
    events.append({"name": "process_sort_index", "ph": "M", "ts": _Us(sc.profiler_start), "pid": "Spans",
                   "tid": 0, "args": {"sort_index": 536870912}})
    events.append({"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces",
                   "tid": "Trace PyTorch Profiler", "ts": _Us(sc.profiler_start)})
    events.append({"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "",
                   "ts": _Us(sc.profiler_end)})
    return events


def _event_key(ev: dict[str, Any]) -> str:
    cat = ev.get("cat")
    return f"{ev['ph']}/{cat}" if cat else str(ev["ph"])


def kineto_event_counts(sc: Scenario) -> dict[str, int]:
    """Count of traceEvents per 'ph/cat' ('M' and 'i' have no cat)."""
    return dict(sorted(Counter(_event_key(e) for e in _kineto_events(sc)).items()))


def kineto_json(sc: Scenario) -> str:
    """The Kineto trace as text: one trace event per line, times as µs with 3 decimals."""
    trace_id = hashlib.sha1(f"tracekit-synthetic/{sc.stem}".encode()).hexdigest()[:32].upper()
    head: list[tuple[str, Any]] = [
        ("schemaVersion", 1),
        ("deviceProperties", _device_properties(sc.n_devices)),
        ("distributedInfo", _distributed_info(sc)),
        ("cuda_runtime_version", 12040),
        ("cuda_driver_version", 12090),
        ("cupti_version", 22),
        ("trace_id", trace_id),
        ("displayTimeUnit", "ms"),
        ("baseTimeNanoseconds", SESSION_EPOCH_NS),
    ]
    lines = ["{"]
    lines += [f"  {json.dumps(k)}: {_dump(v)}," for k, v in head]
    lines.append('  "traceEvents": [')
    events = _kineto_events(sc)
    lines += [f"  {_dump(e)}," for e in events[:-1]]
    lines.append(f"  {_dump(events[-1])}")
    lines.append("  ],")
    lines.append(f'  "traceName": {json.dumps(f"{sc.stem}.kineto.json")}')
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_kineto(sc: Scenario, path: str | os.PathLike[str]) -> Path:
    p = Path(path)
    p.write_text(kineto_json(sc), encoding="utf-8", newline="\n")
    return p
