"""The JSON report: a stable, documented contract (docs/json-report.md).

Top-level keys: ``schema``, ``tracekit_version``, ``trace``, ``summary``, ``steps``,
``findings``, ``sync_points``, ``kernels``, ``memory``, ``data_quality``, ``warnings``.
Times are milliseconds in ``*_ms`` keys and integer nanoseconds in ``*_ns`` keys; shares are
fractions in 0..1.  New keys may be added; existing keys keep their meaning.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from .._version import __version__
from ..analysis import CAUSES, Diagnosis

JSON_SCHEMA_VERSION = "tracekit.report/1"


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(float(x), nd)


def to_json_dict(d: Diagnosis) -> dict[str, Any]:
    info = d.info
    steps = d.steps.sort(["rank", "step"])
    step_rows = [
        {
            "rank": r["rank"],
            "step": r["step"],
            "start_ns": r["start_ns"],
            "dur_ns": r["dur_ns"],
            "gpu_busy_ns": r["gpu_busy_ns"],
            "utilization": _r(r["utilization"]),
            "complete": r["complete"],
            "source": r["source"],
        }
        for r in steps.iter_rows(named=True)
    ]
    syncs = d.syncs
    sync_top = (
        syncs.group_by("api", "op", "sync_kind").agg(pl.len().alias("count"), pl.col("dur_ns").sum().alias("blocked_ns"))
        .sort(["blocked_ns", "count", "api"], descending=[True, True, False]).head(10)
    )
    per_step_syncs = syncs.filter(pl.col("step").is_not_null())
    k = d.kernels
    return {
        "schema": JSON_SCHEMA_VERSION,
        "tracekit_version": __version__,
        "trace": {
            "path": info.path,
            "format": info.format,
            "format_version": info.format_version,
            "producer": info.producer,
            "rank": info.rank,
            "world_size": info.world_size,
            "ranks": list(info.ranks),
            "truncated": info.truncated,
            "devices": [
                {"device": row["device"], "name": row["name"], "vendor": row["vendor"], "total_memory_bytes": row["total_memory_bytes"]}
                for row in _devices(d).iter_rows(named=True)
            ],
        },
        "summary": {
            "steps": int(d.steps.height),
            "complete_steps": d.complete_steps,
            "step_source": sorted(set(d.step_sources.values()))[0] if d.step_sources else None,
            "step_ms_median": _r(d.step_ms_median),
            "step_ms_mean": _r(d.step_ms_mean),
            "gpu_utilization": _r(d.gpu_utilization),
            "breakdown": {c: _r(d.breakdown.get(c, 0.0)) for c in CAUSES} if d.breakdown else {},
            "breakdown_ms_per_step": {c: _r(d.breakdown_ms.get(c, 0.0)) for c in CAUSES} if d.breakdown_ms else {},
            "top_finding": d.findings[0].kind if d.findings else None,
        },
        "steps": step_rows,
        "findings": [f.to_dict() for f in d.findings],
        "sync_points": {
            "count": syncs.height,
            "explicit": int(syncs["explicit"].sum()) if syncs.height else 0,
            "per_step": _r(per_step_syncs.height / max(d.complete_steps, 1)) if syncs.height else 0.0,
            "blocked_ms": _r(float(syncs["dur_ns"].sum()) / 1e6 if syncs.height else 0.0),
            "top": [
                {"api": a, "op": o, "sync_kind": s, "count": c, "blocked_ms": _r(b / 1e6)} for a, o, s, c, b in sync_top.iter_rows()
            ],
        },
        "kernels": {
            "count": k.kernel_count,
            "time_ms": _r(k.kernel_time_ns / 1e6),
            "median_us": _r(None if k.median_kernel_ns is None else k.median_kernel_ns / 1e3),
            "short_kernel_share": _r(k.short_kernel_count / k.kernel_count if k.kernel_count else 0.0),
            "launch_delay_us": {q: _r(None if v is None else v / 1e3) for q, v in k.launch_delay_ns.items()},
            "tensor_core_gpu": k.tensor_core_gpu,
            "top": [
                {
                    "name": r["name"], "category": r["category"], "tensor_cores": r["tensor_cores"], "count": r["count"],
                    "total_ms": _r(r["total_ns"] / 1e6), "mean_us": _r(r["mean_ns"] / 1e3), "share": _r(r["share_of_kernel_time"]),
                }
                for r in k.top.iter_rows(named=True)
            ],
        },
        "memory": [
            {
                "device": m.device, "total_bytes": m.total_bytes, "peak_allocated_bytes": m.peak_allocated_bytes,
                "peak_reserved_bytes": m.peak_reserved_bytes, "headroom": _r(m.headroom),
            }
            for m in d.memory
        ],
        "data_quality": list(d.data_quality),
        "warnings": list(info.warnings),
    }


def _devices(d: Diagnosis) -> pl.DataFrame:
    used = d.timeline.per_step.select("device").unique()
    return d.devices.join(used, on="device", how="semi").sort("device") if d.devices.height else d.devices
