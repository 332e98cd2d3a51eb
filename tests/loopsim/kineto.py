"""Write a simulated loop as a PyTorch-profiler (Kineto) Chrome trace."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .sim import HostEv, Run

PID = 4242
STREAM = 7
DEVICE = 0
BASE_NS = 1_767_225_600_000_000_000
#: the rows of each host thread: (tid, the name Kineto gives the thread)
THREAD_ROWS = {
    "main": (PID, "thread 1 (python3)"),
    # the autograd engine's thread for CUDA device 0, as real traces name it
    "autograd": (PID + 17, f"thread {PID + 17} (pt_autograd_0)"),
    # the DataLoader's pin-memory thread: a Python thread, named as the process
    "pin": (PID + 23, f"thread {PID + 23} (python3)"),
}


def _us(ns: int) -> float:
    return ns / 1000.0


def kineto_events(run: Run) -> list[dict[str, Any]]:
    """traceEvents: host rows, then GPU rows, flows and cuda_sync rows, then metadata."""
    out: list[tuple[int, int, int, dict[str, Any]]] = []
    for i, h in enumerate(run.host):
        out.extend(_host_rows(i, h))
    for g in run.gpu:
        args = {"device": DEVICE, "context": 1, "stream": STREAM, "correlation": g.correlation, **g.args}
        if g.cat == "gpu_memcpy" and "bytes" in args:
            args["memory bandwidth (GB/s)"] = round(args["bytes"] / max(g.end - g.start, 1), 6)
        out.append((g.start, 0, 2, {"ph": "X", "cat": g.cat, "name": g.name, "pid": DEVICE, "tid": STREAM, "ts": _us(g.start),
                                    "dur": _us(g.end - g.start), "args": args}))
        out.append((g.start, 0, 3, {"ph": "f", "id": g.correlation, "pid": DEVICE, "tid": STREAM, "ts": _us(g.start), "cat": "ac2g",
                                    "name": "ac2g", "bp": "e"}))
    for s in run.syncs:
        args = {"cuda_sync_kind": "Stream Sync", "stream": STREAM, "correlation": s.correlation, "device": DEVICE, "context": 1}
        out.append((s.start, 0, 2, {"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": DEVICE, "tid": STREAM,
                                    "ts": _us(s.start), "dur": _us(s.end - s.start), "args": args}))
        out.append((s.start, 0, 3, {"ph": "f", "id": s.correlation, "pid": DEVICE, "tid": STREAM, "ts": _us(s.start), "cat": "ac2g",
                                    "name": "ac2g", "bp": "e"}))
    events = [e for *_k, e in sorted(out, key=lambda x: (x[0], x[1], x[2]))]
    first = min(h.start for h in run.host)
    last = max([run.host_end, *(g.end for g in run.gpu)])
    threads = [t for t in THREAD_ROWS if t != "main" and any(h.thread == t for h in run.host)]
    events += [
        {"name": "process_name", "ph": "M", "ts": _us(first), "pid": PID, "tid": 0, "args": {"name": "python3"}},
        *({"name": "thread_name", "ph": "M", "ts": _us(first), "pid": PID, "tid": THREAD_ROWS[t][0], "args": {"name": THREAD_ROWS[t][1]}}
          for t in ("main", *threads)),
        {"name": "process_name", "ph": "M", "ts": _us(first), "pid": DEVICE, "tid": 0, "args": {"name": "python3"}},
        {"name": "process_labels", "ph": "M", "ts": _us(first), "pid": DEVICE, "tid": 0, "args": {"labels": "GPU 0"}},
        {"ph": "X", "cat": "Trace", "ts": _us(first), "dur": _us(last - first), "pid": "Spans", "tid": "PyTorch Profiler",
         "name": "PyTorch Profiler (0)", "args": {"Op count": 0}},
    ]
    return events


def _host_rows(i: int, h: HostEv) -> list[tuple[int, int, int, dict[str, Any]]]:
    """One host row (sort key: start, longer first, then the row's kind) and its flow ends."""
    tid = THREAD_ROWS[h.thread][0]
    args: dict[str, Any] = {"External id": i + 1, **h.record}
    if h.correlation is not None:
        args["correlation"] = h.correlation
    # parents before children on equal starts: longer first
    rows = [(h.start, -(h.end - h.start), 0, {"ph": "X", "cat": h.cat, "name": h.name, "pid": PID, "tid": tid,
                                              "ts": _us(h.start), "dur": _us(h.end - h.start), "args": args})]
    if h.correlation is not None:
        rows.append((h.start, 0, 1, {"ph": "s", "id": h.correlation, "pid": PID, "tid": tid, "ts": _us(h.start), "cat": "ac2g", "name": "ac2g"}))
    if h.flow is not None:
        # a forward op's sequence number flows to its backward node on the autograd thread
        end, flow_id = h.flow
        flow = {"ph": end, "id": flow_id, "pid": PID, "tid": tid, "ts": _us(h.start), "cat": "fwdbwd", "name": "fwdbwd"}
        rows.append((h.start, 0, 1, flow if end == "s" else {**flow, "bp": "e"}))
    return rows


def write_kineto(run: Run, path: Path) -> Path:
    """Write ``run`` to ``path`` as a Kineto JSON trace; returns ``path``."""
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85_899_345_920, "computeMajor": 8,
                              "computeMinor": 0, "numSms": 108, "maxThreadsPerBlock": 1024, "warpSize": 32}],
        "cuda_runtime_version": 12040,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": BASE_NS,
        "traceName": path.name,
        "traceEvents": kineto_events(run),
    }
    path.write_text(json.dumps(doc))
    return path
