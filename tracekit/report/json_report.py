"""The JSON report: a stable, documented contract (docs/json-report.md).

Top-level keys: ``schema``, ``tracekit_version``, ``trace``, ``answer``, ``summary``, ``plan``,
``plan_summary``, ``steps``, ``findings``, ``sync_points``, ``kernels``, ``efficiency``, ``memory``, ``critical_path``,
``data_quality``, ``warnings``.
Times are milliseconds in ``*_ms`` keys and integer nanoseconds in ``*_ns`` keys; shares are
fractions in 0..1.  New keys may be added; existing keys keep their meaning.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from .._version import __version__
from ..analysis import CAUSES, CriticalPath, Diagnosis
from ..analysis.efficiency import to_dict as efficiency_dict
from ..analysis.plan import Plan
from ..pipeline import FolderResult, JobResult, TraceResult
from .registry import register_document

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
            "warmup": bool(r.get("warmup") or False),
        }
        for r in steps.iter_rows(named=True)
    ]
    syncs = d.syncs
    sync_top = (
        syncs.group_by("api", "op", "sync_kind").agg(pl.len().alias("count"), pl.col("dur_ns").sum().alias("blocked_ns"))
        .sort(["blocked_ns", "count", "api", "op", "sync_kind"], descending=[True, True, False, False, False], nulls_last=True).head(10)
    )
    per_step_syncs = syncs.filter(pl.col("step").is_not_null())
    k = d.kernels
    return {
        "schema": JSON_SCHEMA_VERSION,
        "tracekit_version": __version__,
        "trace": {
            **info.identity(),
            "truncated": info.truncated,
            "devices": [
                {"device": row["device"], "name": row["name"], "vendor": row["vendor"], "total_memory_bytes": row["total_memory_bytes"]}
                for row in _devices(d).iter_rows(named=True)
            ],
        },
        "answer": d.plan.sentence(),
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
            "mfu": _r(d.efficiency.mfu),
            "mfu_dtype": d.efficiency.mfu_dtype,
            "mfu_note": d.efficiency.headline,
            "warmup": d.warmup.to_dict() if d.warmup.found else None,
        },
        "plan": d.plan.to_list(),
        "plan_summary": plan_summary(d.plan),
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
        "efficiency": efficiency_dict(d.efficiency),
        "memory": [
            {
                "device": m.device, "total_bytes": m.total_bytes, "peak_allocated_bytes": m.peak_allocated_bytes,
                "peak_reserved_bytes": m.peak_reserved_bytes, "headroom": _r(m.headroom),
            }
            for m in d.memory
        ],
        "critical_path": _critical_path(d),
        "data_quality": list(d.data_quality),
        "warnings": list(info.warnings),
    }


def plan_summary(plan: Plan) -> dict[str, Any]:
    """How the plan was priced and where it leaves the step (``plan`` holds its steps)."""
    bound = plan.bound
    return {
        "priced_by": plan.priced_by,
        "statistic": plan.statistic,
        "step_ms": _r(plan.step_ms),
        "predicted_step_ms": _r(plan.predicted_step_ms) if plan.steps else None,
        "gpu_utilization": _r(plan.gpu_utilization),
        "bound": None if bound is None else {"what": bound.what, "text": bound.text, "roofline_share": _r(bound.roofline_share)},
        "batch_size": plan.batch_size,
        "note": plan.note,
    }


def _critical_path(d: Diagnosis) -> dict[str, Any] | None:
    """What decides the step time: the critical path's causes, and the asked what-ifs."""
    cp = d.critical_path
    if not isinstance(cp, CriticalPath) or cp.steps.height == 0:
        return None
    steps = cp.steps.filter(pl.col("complete"))
    steps = steps if steps.height else cp.steps
    wall, path = float(steps["wall_ns"].sum()), float(steps["path_ns"].sum())
    ms = cp.breakdown_per_step()
    share = cp.breakdown_share()
    return {
        "path_ms_per_step": _r(path / 1e6 / steps.height),
        "coverage": _r(path / wall if wall else None),
        "inferred_sync": cp.inferred_sync,
        "breakdown": {c: _r(v) for c, v in share.items()},
        "breakdown_ms_per_step": {c: _r(v) for c, v in ms.items()},
        "what_if": [w.to_dict() for w in d.what_ifs],
    }


def _devices(d: Diagnosis) -> pl.DataFrame:
    used = d.timeline.per_step.select("device").unique()
    return d.devices.join(used, on="device", how="semi").sort("device") if d.devices.height else d.devices


def job_to_json_dict(jd: Any) -> dict[str, Any]:
    """The JSON report of a job of ranks (``tracekit analyze FOLDER``).

    The top-level keys are those of :func:`to_json_dict` for the job's lowest rank, so a
    reader of single-trace reports keeps working; ``job`` holds the comparison across ranks
    and ``ranks`` every rank's own report (docs/json-report.md).
    """
    job, m = jd.job, jd.multirank
    first = min(jd.diagnoses)
    data = to_json_dict(jd.diagnoses[first])
    rank_info = {r.rank: r for r in job.ranks}
    per_rank = []
    for row in m.per_rank.iter_rows(named=True):
        rank = int(row["rank"])
        d = jd.diagnoses.get(rank)
        per_rank.append({
            "rank": rank,
            "path": row["source"],
            "rank_source": rank_info[rank].rank_source if rank in rank_info else None,
            "step_source": row["step_source"],
            "steps": row["steps"],
            "step_ms_median": _r(row["step_ms_median"]),
            "gpu_utilization": _r(row["gpu_utilization"]),
            "gpu_busy_ms": _r(row["gpu_busy_ms"]),
            "compute_ms": _r(row["compute_ms"]),
            "communication_ms": _r(row["communication_ms"]),
            "exposed_communication_ms": _r(row["exposed_communication_ms"]),
            "wait_ms": _r(row["wait_ms"]),
            "late_ms": _r(row["late_ms"]),
            "step_start_late_ms": _r(row["step_start_late_ms"]),
            "clock_offset_ms": _r(row["clock_offset_ms"]),
            "straggler": bool(row["straggler"]),
            "top_finding": d.findings[0].kind if d is not None and d.findings else None,
        })
    meta = dict(job.metadata)
    data["job"] = {
        "name": job.name,
        "world_size": job.world_size,
        "ranks": list(m.ranks),
        "files": sorted({r.path for r in job.ranks}),
        "command": meta.get("command"),
        "aligned_steps": len(m.aligned_steps),
        "step_ms_median": _r(m.step_ms_median),
        "stragglers": list(m.stragglers),
        "straggler_basis": m.straggler_basis,
        "straggle_ms_per_step": _r(m.straggle_ms_per_step),
        "imbalance": _r(m.imbalance),
        "imbalance_ms_per_step": _r(m.imbalance_ms_per_step),
        "compute_spread_ms": _r(m.compute_spread_ms),
        "exposed_communication_ms": _r(m.exposed_communication_ms),
        "wait_ms": _r(m.wait_ms),
        "matched_collectives": m.matched_collectives,
        "per_rank": per_rank,
        "findings": [f.to_dict() for f in m.findings],
        "notes": [*job.notes, *m.notes],
        "skipped": [{"path": p, "reason": r} for p, r in job.skipped],
        "model": job_model_dict(getattr(jd, "model", None)),
    }
    data["ranks"] = [to_json_dict(jd.diagnoses[r]) for r in sorted(jd.diagnoses)]
    return data


#: the contract of ``tracekit analyze FOLDER --format json`` on a folder of several jobs
JOBS_SCHEMA_VERSION = "tracekit.jobs/1"


def jobs_to_json_dict(folder: str, jds: list[Any], skipped: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    """The JSON report of the jobs of one folder: ``jobs`` holds one :func:`job_to_json_dict`
    document per job, in name order (docs/json-report.md)."""
    return {
        "schema": JOBS_SCHEMA_VERSION,
        "tracekit_version": __version__,
        "folder": folder,
        "jobs": [job_to_json_dict(jd) for jd in jds],
        "skipped": [{"path": p, "reason": r} for p, r in skipped or []],
    }


def job_model_dict(model: Any) -> dict[str, Any] | None:
    """The job model (:class:`tracekit.analysis.job_model.JobModel`) as JSON: clocks, the
    cross-rank critical path, waits and the job-level what-ifs (largest saving first)."""
    if model is None:
        return None
    from ..analysis.job_model import JOB_FIX_MODELS

    bottleneck = model.bottleneck
    return {
        "ranks": list(model.ranks),
        "missing_ranks": list(model.missing_ranks),
        "matched_collectives": model.matched_collectives,
        "matching": model.matching,
        "unmatched_kernels": model.unmatched_kernels,
        "steps": model.steps,
        "step_basis": "one_step" if model.one_step else "between_steps",
        "step_ms": _r(model.step_ms),
        "replayed_step_ms": _r(model.replayed_step_ms),
        "replay_error": _r(model.error),
        "clock_residual_us": _r(model.clock_residual_us),
        "clocks": [
            {"rank": int(r["rank"]), "clock_offset_ms": _r(r["clock_offset_ms"]), "collectives": int(r["collectives"])}
            for r in model.clocks.iter_rows(named=True)
        ],
        "bottleneck": None if bottleneck is None else {"rank": bottleneck[0], "cause": bottleneck[1]},
        "critical_path": [
            {"rank": None if r["rank"] is None else int(r["rank"]), "cause": r["cause"], "ms_per_step": _r(r["ms_per_step"]), "share": _r(r["share"])}
            for r in model.path.iter_rows(named=True)
        ],
        "waits": [
            {
                "rank": int(r["rank"]), "wait_ms_per_step": _r(r["wait_ms_per_step"]),
                "waits_for": None if r["waits_for"] is None else int(r["waits_for"]), "waits_for_ms_per_step": _r(r["waits_for_ms_per_step"]),
            }
            for r in model.waits.iter_rows(named=True)
        ],
        "what_ifs": [
            {
                "kind": w.kind, "label": w.label, "question": w.question, "saving_ms": _r(w.saving_ms),
                "predicted_step_ms": _r(w.predicted_step_ms), "rank": w.rank, "cause": w.cause, "model": JOB_FIX_MODELS.get(w.kind),
            }
            for w in model.what_ifs
        ],
        "notes": list(model.notes),
    }


# --------------------------------------------------------------------------- registered renderings

# the JSON documents of the pipeline's results (tracekit.report.registry)
register_document(TraceResult, lambda r: to_json_dict(r.diagnosis))
register_document(JobResult, lambda r: job_to_json_dict(r.job_diagnosis))
register_document(FolderResult, lambda r: jobs_to_json_dict(r.folder, r.job_diagnoses, list(r.skipped)))
