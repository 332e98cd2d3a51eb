"""``run_batch``: discover → hash → reuse or analyse → group into jobs → compare ranks → write.

The driver (this module) does everything but the per-trace work: it finds the files, hashes
them (a file whose size and modification time match the previous run keeps its old hash),
restores results of content analysed before by the same tracekit version, analyses each
distinct content once on the chosen engine, groups files into jobs
(:func:`tracekit.reading.job.group_jobs`), compares the ranks of each job
(:func:`tracekit.analysis.multirank.analyze_ranks`) and writes the tables atomically.
While the batch runs, the tables are checkpointed every ``checkpoint_s`` seconds and on
Ctrl-C, so an interrupted batch resumes where it stopped.
"""

from __future__ import annotations

import datetime as _dt
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from .._version import __version__
from ..analysis.multirank import MultiRank, RankProfile, analyze_ranks
from ..errors import UsageError
from ..reading.job import JobPlan, group_jobs
from .discover import Discovered, discover
from .engines import run_tasks
from .schemas import BATCH_SCHEMA_VERSION, COLLECTIVES, FINDINGS, JOBS, OPS, RANKS, STEPS, TRACES
from .store import Journal, load_previous, write_outputs
from .work import FileResult, Task, content_hash, finding_row


@dataclass(frozen=True)
class BatchProgress:
    """Where a running batch stands (handed to the progress callback)."""

    total: int
    done: int
    failed: int
    reused: int
    bytes_total: int
    bytes_done: int
    elapsed_s: float
    current: str | None = None


@dataclass
class BatchResult:
    """What a batch did and the tables it wrote."""

    out: Path
    tables: dict[str, pl.DataFrame]
    files: int
    analysed: int
    reused: int
    duplicates: int
    failed: int
    ignored: int
    jobs: int
    seconds: float
    bytes_analysed: int
    written: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stopped_early: bool = False
    #: the first failure when the batch stopped on it (--fail-fast)
    first_error: FileResult | None = None

    @property
    def traces_per_minute(self) -> float:
        return 60.0 * self.analysed / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes_analysed / 1e6 / self.seconds if self.seconds > 0 else 0.0


Progress = Callable[[BatchProgress], None]


def run_batch(
    inputs: Sequence[str | Path],
    out: str | Path,
    *,
    workers: int | None = None,
    engine: str = "local",
    ray_address: str | None = None,
    fail_fast: bool = False,
    cache: bool = False,
    incremental: bool = True,
    progress: Progress | None = None,
    checkpoint_s: float = 60.0,
    max_memory_per_file: int | None = None,
) -> BatchResult:
    """Analyse every trace of ``inputs`` and write the batch tables into ``out``.

    Args:
        inputs: files, folders, globs and manifests (see :mod:`tracekit.batch.discover`).
        out: output folder (created); its previous tables make the run incremental.
        workers: local worker processes (default: the CPUs available); CPUs of a local Ray instance.
        engine: ``local`` or ``ray``.
        ray_address: Ray cluster address (``ray://host:10001``, ``auto``); None starts a local instance.
        fail_fast: stop at the first file that cannot be analysed (the tables written hold what was done).
        cache: read and fill the parsed-trace Parquet cache (off by default: an archive would be copied into it).
        incremental: reuse the previous results in ``out``.
        progress: called after each file with a :class:`BatchProgress`.
        checkpoint_s: write the tables at least this often while running (each result is also
            kept in a journal as it arrives, so even a killed batch resumes where it stopped).
        max_memory_per_file: stop a worker whose resident memory exceeds this many bytes; its
            file gets a ``memory_limit`` error row (local engine; files then run in worker processes).
    """
    t0 = time.perf_counter()
    out_path = Path(out).expanduser().absolute()
    if out_path.exists() and not out_path.is_dir():
        raise UsageError("the output must be a folder", path=out_path)
    n_workers = max(1, workers if workers is not None else _cpus())
    found = discover([str(i) for i in inputs], exclude=[str(out_path)])
    if not found.files:
        raise UsageError("no trace files found in the inputs", hint="inputs are trace files, folders, globs or manifests")
    journal = Journal(out_path)
    suspects = journal.interrupted()  # files a killed run was analysing in its own process
    if not incremental:
        journal.clear()
    prev, prev_note = load_previous(out_path) if incremental else (None, None)
    notes = [prev_note] if prev_note else []

    # --- hash, reuse, and one task per distinct content
    results: dict[str, FileResult] = {}  # path → result
    by_hash: dict[str, FileResult] = {}
    tasks: dict[str, Task] = {}
    paths_of: dict[str, list[str]] = {}
    reused = 0
    for path in found.files:
        try:
            st = os.stat(path)
            digest = (prev.known_hash(path, st.st_size, st.st_mtime_ns) if prev else None) or content_hash(path)
        except OSError as exc:
            results[path] = FileResult(path=path, content_hash="", size_bytes=0, mtime_ns=0,
                                       error=f"cannot read the file: {exc.strerror or exc}", error_kind="TraceNotFoundError")
            continue
        paths_of.setdefault(digest, []).append(path)
        if digest in by_hash or digest in tasks:
            continue
        restored = prev.restore(digest, path, st.st_size, st.st_mtime_ns) if prev else None
        if restored is not None:
            by_hash[digest] = restored
            reused += 1
        else:
            tasks[digest] = Task(path=path, content_hash=digest, size_bytes=st.st_size, mtime_ns=st.st_mtime_ns, cache=cache)
    duplicates = sum(len(v) - 1 for v in paths_of.values())

    total_bytes = sum(t.size_bytes for t in tasks.values())
    state = {"done": 0, "failed": 0, "bytes": 0, "last_checkpoint": time.perf_counter()}
    first_error: list[FileResult] = []
    hard_failures = [r for r in results.values() if r.error]
    if fail_fast and hard_failures:
        first_error.append(hard_failures[0])

    def snapshot(complete: bool) -> dict[str, pl.DataFrame]:
        merged = dict(results)
        for digest, paths in paths_of.items():
            r = by_hash.get(digest)
            if r is None:
                continue
            for p in paths:
                merged[p] = r if p == r.path else _copy_for(r, p)
        return build_tables(merged, found, complete=complete)

    def checkpoint(complete: bool) -> tuple[dict[str, pl.DataFrame], list[Path]]:
        tables = snapshot(complete)
        summary = _summary(found, inputs, engine, n_workers, len(found.files), len(tasks), reused, duplicates,
                           tables, time.perf_counter() - t0, state["bytes"], complete)
        written = write_outputs(out_path, tables, summary)
        journal.clear()  # the tables now hold every result so far
        return tables, written

    def on_result(r: FileResult) -> bool:
        journal.add(r)
        by_hash[r.content_hash] = r
        state["done"] += 1
        state["bytes"] += r.size_bytes
        if r.error:
            state["failed"] += 1
        if progress is not None:
            progress(BatchProgress(
                total=len(tasks), done=int(state["done"]), failed=int(state["failed"]), reused=reused,
                bytes_total=total_bytes, bytes_done=int(state["bytes"]), elapsed_s=time.perf_counter() - t0, current=r.path,
            ))
        if r.error and fail_fast:
            first_error.append(r)
            return False
        if time.perf_counter() - state["last_checkpoint"] >= checkpoint_s:
            checkpoint(complete=False)
            state["last_checkpoint"] = time.perf_counter()
        return True

    if progress is not None:
        progress(BatchProgress(total=len(tasks), done=0, failed=0, reused=reused, bytes_total=total_bytes, bytes_done=0, elapsed_s=time.perf_counter() - t0))
    stopped = bool(first_error)
    if tasks and not stopped:
        try:
            run_tasks(list(tasks.values()), on_result, engine=engine, workers=n_workers, ray_address=ray_address,
                      max_memory=max_memory_per_file, on_start=journal.start, isolate=suspects)
        except KeyboardInterrupt:
            checkpoint(complete=False)  # keep what was done: the next run resumes from it
            raise
        stopped = bool(first_error)

    tables, written = checkpoint(complete=not stopped)
    seconds = time.perf_counter() - t0
    traces = tables["traces"]
    return BatchResult(
        out=out_path,
        tables=tables,
        files=len(found.files),
        analysed=int(state["done"]),
        reused=reused,
        duplicates=duplicates,
        failed=int(traces.filter(pl.col("error").is_not_null()).height),
        ignored=found.ignored,
        jobs=tables["jobs"].height,
        seconds=seconds,
        bytes_analysed=int(state["bytes"]),
        written=written,
        notes=notes,
        stopped_early=stopped,
        first_error=first_error[0] if first_error else None,
    )


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _copy_for(r: FileResult, path: str) -> FileResult:
    """The result of identical content, for another path (duplicates are analysed once)."""
    try:
        st = os.stat(path)
        size, mtime = st.st_size, st.st_mtime_ns
    except OSError:
        size, mtime = r.size_bytes, r.mtime_ns
    return FileResult(
        path=path, content_hash=r.content_hash, size_bytes=size, mtime_ns=mtime, trace=r.trace, findings=r.findings,
        ranks=r.ranks, steps=r.steps, collectives=r.collectives, ops=r.ops, error=r.error, error_kind=r.error_kind, seconds=r.seconds,
    )


def _summary(found: Discovered, inputs: Sequence[str | Path], engine: str, workers: int, files: int, analysed: int, reused: int,
             duplicates: int, tables: dict[str, pl.DataFrame], seconds: float, nbytes: float, complete: bool) -> dict[str, Any]:
    traces = tables["traces"]
    return {
        "batch_schema": BATCH_SCHEMA_VERSION,
        "tracekit_version": __version__,
        "written_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "complete": complete,
        "inputs": [str(i) for i in inputs],
        "root": found.root,
        "engine": engine,
        "workers": workers,
        "files": files,
        "to_analyse": analysed,
        "reused": reused,
        "duplicates": duplicates,
        "failed": int(traces.filter(pl.col("error").is_not_null()).height),
        "ignored_files": found.ignored,
        "jobs": tables["jobs"].height,
        "seconds": round(seconds, 3),
        "bytes_analysed": int(nbytes),
    }


# --------------------------------------------------------------------------- tables


def build_tables(results: dict[str, FileResult], found: Discovered, *, complete: bool = True) -> dict[str, pl.DataFrame]:
    """The batch tables from per-file results (paths not yet analysed are left out)."""
    ok = {p: r for p, r in sorted(results.items()) if r.ok}
    plans = group_jobs([r.meta() for r in ok.values()], found.captures, relative_to=found.root)
    trace_rows: list[dict[str, Any]] = []
    finding_rows: list[dict[str, Any]] = []
    job_rows: list[dict[str, Any]] = []
    rank_rows: list[dict[str, Any]] = []
    step_frames: list[pl.DataFrame] = []
    late_frames: list[pl.DataFrame] = []
    coll_frames: list[pl.DataFrame] = []
    op_frames: list[pl.DataFrame] = []
    for plan in plans:
        files = [ok[p] for p in sorted(plan.members)]
        profiles: list[RankProfile] = []
        for r in files:
            profiles.extend(r.profiles(dict(plan.members[r.path])))
        m = analyze_ranks(profiles, world_size=plan.world_size)
        for r in files:
            mapping = plan.members[r.path]
            job_ranks = sorted(mapping.values())
            row = {**r.trace, "path": r.path, "content_hash": r.content_hash, "size_bytes": r.size_bytes, "mtime_ns": r.mtime_ns,
                   "seconds": r.seconds, "job": plan.name, "ranks": job_ranks,
                   "rank": job_ranks[0] if len(job_ranks) == 1 else None, "rank_source": plan.rank_sources[r.path]}
            trace_rows.append(row)
            single = job_ranks[0] if len(job_ranks) == 1 else None
            finding_rows.extend({**f, "scope": "trace", "job": plan.name, "path": r.path, "content_hash": r.content_hash, "rank": single}
                                for f in r.findings)
        finding_rows.extend({**finding_row(f, i), "scope": "job", "job": plan.name} for i, f in enumerate(m.findings, 1))
        job_rows.append({**_job_row(plan, files, m), **_job_model_columns(profiles, plan)})
        rank_rows.extend(_rank_rows(plan, files, m))
        step_frames.extend(_job_steps(plan, files))
        late_frames.append(m.per_step.select(pl.lit(plan.name).alias("job"), "rank", "step", "start_late_ns", "late_ns", "wait_ns"))
        coll_frames.extend(_job_collectives(plan, files))
        op_frames.extend(_job_ops(plan, files))
    for p, r in sorted(results.items()):
        if not r.ok:
            trace_rows.append({"path": p, "content_hash": r.content_hash or None, "size_bytes": r.size_bytes, "mtime_ns": r.mtime_ns,
                               "tracekit_version": __version__, "error": r.error, "error_kind": r.error_kind, "seconds": r.seconds})
    del complete
    return {
        "traces": _frame(TRACES.polars_schema, trace_rows).sort("path"),
        "findings": _frame(FINDINGS.polars_schema, finding_rows).sort(["scope", "job", "path", "position"], nulls_last=True),
        "jobs": _frame(JOBS.polars_schema, job_rows).sort("job"),
        "ranks": _frame(RANKS.polars_schema, rank_rows).sort(["job", "rank"]),
        "steps": _steps(step_frames, late_frames),
        "collectives": _concat(coll_frames, COLLECTIVES.polars_schema).sort(["job", "rank", "step", "start_ns", "stream"]),
        "ops": _concat(op_frames, OPS.polars_schema).sort(
            ["job", "path", "rank", "gpu_ns", "name", "shape", "dtype"], descending=[False, False, False, True, False, False, False],
            nulls_last=True),
    }


def _steps(step_frames: list[pl.DataFrame], late_frames: list[pl.DataFrame]) -> pl.DataFrame:
    """Every rank's steps with the cross-rank lateness of the compared ones (one join for all jobs)."""
    cols = [c for c in STEPS.polars_schema.names() if c not in ("start_late_ns", "late_ns", "wait_ns")]
    steps = _concat([f.select(cols) for f in step_frames], pl.Schema({c: STEPS.polars_schema[c] for c in cols}))
    late = pl.concat(late_frames) if late_frames else pl.DataFrame(schema={"job": pl.String, "rank": pl.Int32, "step": pl.Int64})
    joined = steps.join(late, on=["job", "rank", "step"], how="left") if late.height else steps
    return STEPS.conform(joined).sort(["job", "rank", "path", "step"])


def _frame(schema: Any, rows: list[dict[str, Any]]) -> pl.DataFrame:
    if not rows:
        return pl.DataFrame(schema=schema)
    names = list(schema.names())
    data = {n: [row.get(n) for row in rows] for n in names}
    return pl.DataFrame(data, schema=schema, strict=False)


def _concat(frames: list[pl.DataFrame], schema: Any) -> pl.DataFrame:
    frames = [f.select(list(schema.names())).cast(dict(schema)) for f in frames if f.height]
    return pl.concat(frames) if frames else pl.DataFrame(schema=schema)


def _top(m: MultiRank, files: list[FileResult]) -> tuple[str | None, float | None]:
    candidates: list[tuple[float, str]] = [(f.ms_per_step, f.kind) for f in m.findings[:1]]
    if not candidates:
        candidates = [(float(r.trace["top_finding_ms"]), str(r.trace["top_finding"])) for r in files if r.trace.get("top_finding")]
    if not candidates:
        return None, None
    ms, kind = max(candidates, key=lambda c: (c[0], c[1]))
    return kind, ms


def _job_row(plan: JobPlan, files: list[FileResult], m: MultiRank) -> dict[str, Any]:
    per_rank = m.per_rank
    utils = per_rank["gpu_utilization"].drop_nulls()
    idle = [float(r.trace["gpu_idle_s"]) for r in files if r.trace.get("gpu_idle_s") is not None]
    top, top_ms = _top(m, files)
    step = m.step_ms_median
    return {
        "job": plan.name,
        "folder": plan.folder,
        "files": len(files),
        "paths": [r.path for r in files],
        "n_ranks": len(plan.ranks),
        "ranks": list(plan.ranks),
        "world_size": plan.world_size,
        "aligned_steps": len(m.aligned_steps),
        "step_ms_median": step,
        "rank_step_ms": per_rank["step_ms_median"].to_list(),
        "rank_compute_ms": per_rank["compute_ms"].to_list(),
        "gpu_utilization": float(utils.mean()) if utils.len() else None,  # type: ignore[arg-type]
        "gpu_idle_s": float(sum(idle)) if idle else None,
        "imbalance": m.imbalance,
        "imbalance_ms": m.imbalance_ms_per_step,
        "compute_spread_ms": m.compute_spread_ms,
        "stragglers": list(m.stragglers),
        "straggler_basis": m.straggler_basis,
        "straggle_ms": m.straggle_ms_per_step,
        "exposed_communication_ms": m.exposed_communication_ms,
        "exposed_communication_share": m.exposed_communication_ms / step if step and m.exposed_communication_ms is not None else None,
        "wait_ms": m.wait_ms,
        "matched_collectives": m.matched_collectives,
        "top_finding": top,
        "top_finding_ms": top_ms,
        "notes": [*plan.notes, *m.notes],
    }


def _job_model_columns(profiles: list[RankProfile], plan: JobPlan) -> dict[str, Any]:
    """Job-level predictions of the job model (:mod:`tracekit.analysis.job_replay`), from the
    ranks' collectives alone (batch keeps no per-rank idle gaps, so no per-cause what-ifs)."""
    from ..analysis.job_replay import model_job, overlapped_share

    out: dict[str, Any] = {
        "job_step_ms": None, "critical_rank": None, "straggler_fixed_step_ms": None, "overlap_step_ms": None,
        "collective_matching": None, "job_model_note": None,
    }
    ranks = sorted({p.rank for p in profiles})
    if len(ranks) < 2:
        out["job_model_note"] = "one rank: there is nothing to join it with."
        return out
    frames = [p.collectives for p in profiles if p.collectives.height]
    if not frames:
        out["job_model_note"] = "no rank records communication kernels: the ranks are not coupled in the job model."
        return out
    jm = model_job(
        pl.concat(frames, how="vertical_relaxed"), pl.DataFrame(), ranks=ranks, world_size=plan.world_size,
        overlapped_share=overlapped_share(profiles),
    )
    slow, overlap = jm.what_if("straggler_at_median"), jm.what_if("perfect_overlap")
    bottleneck = jm.bottleneck
    out.update(
        job_step_ms=jm.step_ms,
        critical_rank=None if bottleneck is None else bottleneck[0],
        straggler_fixed_step_ms=None if slow is None else slow.predicted_step_ms,
        overlap_step_ms=None if overlap is None else overlap.predicted_step_ms,
        collective_matching=jm.matching,
    )
    if jm.step_ms is None or not jm.what_ifs:
        # the model's own reason (withheld what-ifs: side-stream communication needs the launch
        # links batch does not keep, or the replay misses the recorded step)
        reasons = [n for n in jm.notes if "withheld" in n or "not coupled" in n or "single step" in n]
        out["job_model_note"] = (reasons or list(jm.notes) or ["the job model has no prediction for this job."])[-1]
    return out


def _rank_rows(plan: JobPlan, files: list[FileResult], m: MultiRank) -> list[dict[str, Any]]:
    per_rank = {int(r["rank"]): r for r in m.per_rank.iter_rows(named=True)}
    rows = []
    for r in files:
        mapping = plan.members[r.path]
        info = {int(x["file_rank"]): x for x in r.ranks}
        for file_rank, job_rank in sorted(mapping.items(), key=lambda kv: kv[1]):
            base = per_rank.get(job_rank, {})
            extra = info.get(file_rank, {})
            rows.append({
                **{k: v for k, v in base.items() if k != "source"},
                "job": plan.name, "rank": job_rank, "path": r.path, "file_rank": file_rank,
                "rank_source": plan.rank_sources[r.path],
                "step_source": base.get("step_source") or extra.get("step_source"),
                "steps": base.get("steps", 0),
                "straggler": bool(base.get("straggler", False)),
                "top_finding": extra.get("top_finding"),
            })
    return rows


def _job_steps(plan: JobPlan, files: list[FileResult]) -> list[pl.DataFrame]:
    out = []
    for r in files:
        if r.steps.height == 0:
            continue
        out.append(r.steps.with_columns(
            pl.col("rank").alias("file_rank"),
            _job_rank(plan.members[r.path]),
            pl.lit(plan.name).alias("job"), pl.lit(r.path).alias("path"),
        ))
    return out


def _job_rank(mapping: Mapping[int, int]) -> pl.Expr:
    if all(k == v for k, v in mapping.items()):
        return pl.col("rank")
    return pl.col("rank").replace_strict(dict(mapping), default=pl.col("rank"), return_dtype=pl.Int32).alias("rank")


def _job_collectives(plan: JobPlan, files: list[FileResult]) -> list[pl.DataFrame]:
    out = []
    for r in files:
        if r.collectives.height == 0:
            continue
        mapping = plan.members[r.path]
        out.append(r.collectives.with_columns(
            pl.col("rank").alias("file_rank"), _job_rank(mapping), pl.lit(plan.name).alias("job"), pl.lit(r.path).alias("path"),
        ))
    return out


def _job_ops(plan: JobPlan, files: list[FileResult]) -> list[pl.DataFrame]:
    out = []
    for r in files:
        if r.ops.height == 0:
            continue
        out.append(r.ops.with_columns(
            pl.col("rank").alias("file_rank"), _job_rank(plan.members[r.path]), pl.lit(plan.name).alias("job"),
            pl.lit(r.path).alias("path"), pl.lit(r.content_hash).alias("content_hash"),
        ))
    return out


__all__ = ["BatchProgress", "BatchResult", "build_tables", "run_batch"]
