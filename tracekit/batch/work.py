"""The per-trace work of a batch: one file in, one small picklable :class:`FileResult` out.

:func:`analyze_file` runs in a worker process (local pool or Ray): it reads and diagnoses the
trace through :mod:`tracekit.pipeline` (as ``tracekit analyze`` does), splits a file of several
ranks into its ranks (each diagnosed on its own) and condenses everything into rows and three
small frames.  It never raises for a bad file: the reason becomes the
result's ``error``.
"""

from __future__ import annotations

import datetime as _dt
import json
import time
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from .._version import __version__
from ..analysis.causes import CAUSES
from ..analysis.efficiency import Efficiency, summarise
from ..analysis.multirank import COLLECTIVES_SCHEMA, PROFILE_STEPS_SCHEMA, RankProfile
from ..errors import TracekitError
from ..reading.cache import file_digest
from ..reading.job import FileMeta
from .schemas import OPS

#: epoch instants (ns) between which a trace's clock is taken to be wall-clock time
_EPOCH_MIN_NS = 946_684_800 * 10**9  # 2000-01-01
_EPOCH_MAX_NS = 4_102_444_800 * 10**9  # 2100-01-01

#: the ops table's columns a file's result carries (``rank`` is the file's rank number)
FILE_OPS_SCHEMA = pl.Schema({c.name: c.dtype for c in OPS.columns if c.name not in ("job", "path", "content_hash", "file_rank")})
#: what makes an operator shape (the ops table's key within a rank)
_SHAPE_KEY = ["name", "op_class", "shape", "dtype"]


@dataclass(frozen=True)
class Task:
    """One unique file to analyse."""

    path: str
    content_hash: str
    size_bytes: int
    mtime_ns: int
    cache: bool = False


@dataclass
class FileResult:
    """Everything the batch keeps about one analysed file (ranks as the file numbers them)."""

    path: str
    content_hash: str
    size_bytes: int
    mtime_ns: int
    #: traces-table fields known from the file alone (no job, no job ranks)
    trace: dict[str, Any] = field(default_factory=dict)
    #: findings-table rows (scope ``trace``), without job and rank
    findings: list[dict[str, Any]] = field(default_factory=list)
    #: per file rank: file_rank, step_source, top_finding
    ranks: list[dict[str, Any]] = field(default_factory=list)
    #: PROFILE_STEPS_SCHEMA rows, rank = the file's rank numbers
    steps: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=PROFILE_STEPS_SCHEMA))
    #: COLLECTIVES_SCHEMA rows, rank = the file's rank numbers
    collectives: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=COLLECTIVES_SCHEMA))
    #: FILE_OPS_SCHEMA rows: the operator-shape efficiency of each file rank (empty without shapes)
    ops: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=FILE_OPS_SCHEMA))
    error: str | None = None
    error_kind: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    def meta(self) -> FileMeta:
        """The grouping record of this file (only meaningful when ``ok``)."""
        t = self.trace
        ranks = tuple(int(r) for r in t.get("file_ranks") or (0,))
        pids = t.get("file_pids") or []
        return FileMeta(
            path=self.path,
            format=str(t.get("format") or "unknown"),
            ranks=ranks,
            trusted=bool(t.get("rank_trusted")),
            world_size=t.get("world_size"),
            start_ns=t.get("start_ns"),
            end_ns=t.get("end_ns"),
            rank_pids={int(r): int(p) for r, p in zip(ranks, pids, strict=False) if p is not None},
        )

    def profiles(self, mapping: dict[int, int] | None = None) -> list[RankProfile]:
        """One RankProfile per file rank, renumbered to job ranks by ``mapping``."""
        mapping = mapping or {}
        out = []
        by_rank = {int(r["file_rank"]): r for r in self.ranks}
        for file_rank in sorted(by_rank):
            job_rank = mapping.get(file_rank, file_rank)
            relabel = pl.lit(job_rank, dtype=pl.Int32).alias("rank")
            out.append(
                RankProfile(
                    rank=job_rank,
                    source=self.path,
                    steps=self.steps.filter(pl.col("rank") == file_rank).with_columns(relabel),
                    collectives=self.collectives.filter(pl.col("rank") == file_rank).with_columns(relabel),
                    step_source=by_rank[file_rank].get("step_source"),
                )
            )
        return out


def content_hash(path: str) -> str:
    """BLAKE2b-160 of a file's bytes, hex (the same digest the parse cache uses)."""
    return file_digest(path)


def analyze_file(task: Task) -> FileResult:
    """Analyse one trace file; failures become ``error`` (never raised)."""
    t0 = time.perf_counter()
    result = FileResult(path=task.path, content_hash=task.content_hash, size_bytes=task.size_bytes, mtime_ns=task.mtime_ns)
    try:
        _analyze(task, result)
    except TracekitError as exc:
        result.error, result.error_kind = exc.message, type(exc).__name__
    except MemoryError:
        result.error, result.error_kind = "out of memory while analysing the file", "MemoryError"
    except Exception as exc:  # a bug in tracekit: keep the batch going and report it
        result.error, result.error_kind = f"internal error: {type(exc).__name__}: {exc}", "internal"
    if result.error is not None:
        result.trace, result.findings, result.ranks = {}, [], []
        result.steps = pl.DataFrame(schema=PROFILE_STEPS_SCHEMA)
        result.collectives = pl.DataFrame(schema=COLLECTIVES_SCHEMA)
        result.ops = pl.DataFrame(schema=FILE_OPS_SCHEMA)
    result.seconds = time.perf_counter() - t0
    return result


def _analyze(task: Task, result: FileResult) -> None:
    from .. import pipeline

    analysed = pipeline.run(pipeline.load_trace(task.path, cache=task.cache))
    tables, d = analysed.tables, analysed.diagnosis
    info = tables.info
    meta = FileMeta.from_tables(task.path, tables)

    split = analysed.split_ranks()
    profiles = split.profiles
    if len(split.ranks) == 1:
        tops = {p.rank: (d.findings[0].kind if d.findings else None) for p in profiles}
        if not profiles:  # no steps at all: still one rank
            tops = {split.ranks[0]: None}
    else:
        tops = {r: (dr.findings[0].kind if dr.findings else None) for r, dr in split.diagnoses.items()}
    sources = {p.rank: p.step_source for p in profiles}
    result.ranks = [{"file_rank": r, "step_source": sources.get(r), "top_finding": tops[r]} for r in sorted(tops)]
    steps = [p.steps for p in profiles if p.steps.height]
    colls = [p.collectives for p in profiles if p.collectives.height]
    if steps:
        result.steps = pl.concat(steps)
    if colls:
        result.collectives = pl.concat(colls)

    complete = d.steps.filter(pl.col("complete") & pl.col("gpu_busy_ns").is_not_null())
    idle_s = float((complete["dur_ns"] - complete["gpu_busy_ns"]).sum()) / 1e9 if complete.height else None
    used = d.timeline.per_step.select("device").unique()
    gpus = d.devices.join(used, on="device", how="semi") if d.devices.height else d.devices
    gpu_names = sorted({str(n) for n in gpus["name"].drop_nulls().to_list() if n}) if gpus.height else []
    start = info.start_ns
    trace: dict[str, Any] = {
        "tracekit_version": __version__,
        "format": meta.format,
        "format_version": info.format_version,
        "producer": info.producer,
        "file_ranks": list(meta.ranks),
        "file_pids": [meta.rank_pids.get(r) for r in meta.ranks],
        "rank_trusted": meta.trusted,
        "world_size": info.world_size,
        "captured_at": _utc(start) if start is not None and _EPOCH_MIN_NS <= start <= _EPOCH_MAX_NS else None,
        "start_ns": info.start_ns,
        "end_ns": info.end_ns,
        "gpu": ", ".join(gpu_names) or None,
        "events": tables.events.height,
        "steps": d.complete_steps,
        "step_source": ", ".join(sorted(set(d.step_sources.values()))) or None,
        "step_ms_median": d.step_ms_median,
        "step_ms_mean": d.step_ms_mean,
        "gpu_utilization": d.gpu_utilization,
        "gpu_idle_s": idle_s,
        "mfu": d.efficiency.mfu,
        "mfu_dtype": d.efficiency.mfu_dtype,
        "model_tflops": d.efficiency.achieved_tflops,
        "mfu_note": d.efficiency.headline,
        "busy_efficient_share": d.efficiency.split.get("busy_efficient"),
        "busy_inefficient_share": d.efficiency.split.get("busy_inefficient"),
        "top_finding": d.findings[0].kind if d.findings else None,
        "top_finding_ms": d.findings[0].ms_per_step if d.findings else None,
        "findings": len(d.findings),
        "data_quality": list(d.data_quality),
        "warnings": list(info.warnings),
        "truncated": info.truncated,
    }
    for cause in CAUSES:
        trace[f"{cause}_ms"] = d.breakdown_ms.get(cause) if d.breakdown_ms else None
        trace[f"{cause}_share"] = d.breakdown.get(cause) if d.breakdown else None
    result.trace = trace
    result.findings = [finding_row(f, i) for i, f in enumerate(d.findings, 1)]
    result.ops = op_table(d.efficiency)


def op_table(eff: Efficiency) -> pl.DataFrame:
    """The per-operator-shape efficiency of each rank (FILE_OPS_SCHEMA), as ``tracekit export``'s
    efficiency.parquet states it for the whole file, plus the GPU time per complete step."""
    if not eff.available or eff.ops.height == 0:
        return pl.DataFrame(schema=FILE_OPS_SCHEMA)
    steps = eff.per_step.filter(pl.col("complete")) if eff.per_step.height else eff.per_step
    frames = []
    for (rank,), ops in eff.ops.partition_by("rank", as_dict=True, maintain_order=True).items():
        table = summarise(ops, _SHAPE_KEY)  # shares of this rank's modelled GPU time
        rank_steps = steps.filter(pl.col("rank") == rank).select("rank", "step") if steps.height else None
        if rank_steps is not None and rank_steps.height:
            in_steps = (
                ops.join(rank_steps, on=["rank", "step"], how="semi")
                .group_by(_SHAPE_KEY)
                .agg((pl.col("gpu_ns").sum() / 1e6 / rank_steps.height).alias("ms_per_step"))
            )
            table = table.join(in_steps, on=_SHAPE_KEY, how="left", nulls_equal=True).with_columns(pl.col("ms_per_step").fill_null(0.0))
        else:
            table = table.with_columns(pl.lit(None, dtype=pl.Float64).alias("ms_per_step"))
        frames.append(table.with_columns(pl.lit(rank, dtype=pl.Int32).alias("rank")))
    out = pl.concat(frames, how="diagonal_relaxed").with_columns(
        pl.lit(eff.device_name, dtype=pl.String).alias("gpu"),
        pl.lit(eff.peaks.model if eff.peaks is not None else None, dtype=pl.String).alias("peak_model"),
    )
    return out.select([pl.col(n).cast(t) for n, t in FILE_OPS_SCHEMA.items()])


def _utc(ns: int) -> _dt.datetime:
    return _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc) + _dt.timedelta(microseconds=ns // 1000)


def finding_row(f: Any, position: int) -> dict[str, Any]:
    """A findings-table row (without scope, job, path and rank) from a Finding."""
    return {
        "position": position,
        "kind": f.kind,
        "title": f.title,
        "ms_per_step": f.ms_per_step,
        "share_of_step": f.share_of_step,
        "steps_affected": f.steps_affected,
        "worst_steps": [int(s) for s in f.worst_steps],
        "evidence": json.dumps(f.evidence, sort_keys=True, default=str),
        "fix": f.fix,
    }


__all__ = ["FILE_OPS_SCHEMA", "FileResult", "Task", "analyze_file", "content_hash", "finding_row", "op_table"]
