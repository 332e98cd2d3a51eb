"""The one pipeline: every analysis of one trace (:func:`diagnose`) or of a job's ranks
(:func:`diagnose_job`).

The command line, the terminal UI's loader and the batch worker all call these functions, so
the three front ends cannot drift apart: what ``tracekit analyze`` reports for a trace is what
the TUI shows and what a batch run tabulates.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import polars as pl

from ..progress import Progress
from ..schema import GPU_ACTIVITY_KINDS, EventKind, TraceTables
from .causes import CAUSES, SUPERSEDES
from .codeloc import LineSource, evidence_count, finding_locations
from .efficiency import efficiency, efficiency_findings
from .findings import MIN_SHARE, Finding, build_findings
from .host import host_breakdown
from .job_model import JobModel
from .job_replay import from_profiles, rank_job_findings
from .job_results import JobDiagnosis
from .kernels import kernel_stats
from .memory import memory_headroom
from .multirank import RankProfile, analyze_ranks, rank_profiles
from .pricing import PricingInputs, answer
from .program_advice import advise, memory_from_program
from .results import Diagnosis
from .steady import WarmUp, find_warmup, per_median_step
from .steps import Steps, find_steps
from .syncs import find_syncs
from .timeline import analyze_timeline, gpu_activity
from .whatif import WhatIf

if TYPE_CHECKING:
    from ..reading.job import Job, RankTrace
    from ..reading.program import ProgramFacts


def diagnose(
    tables: TraceTables, *, what_if: Sequence[Mapping[str, float]] = (), progress: Progress | None = None,
    program: ProgramFacts | None = None, code: LineSource | None = None,
) -> Diagnosis:
    """Run every analysis on one trace.

    ``what_if`` lists extra questions (each a mapping cause → factor, see
    :mod:`tracekit.analysis.whatif`); every finding's fix is priced regardless, and the what-if
    engine (:mod:`tracekit.analysis.pricing`) decides which model answers each.
    ``progress`` is told each phase (``steps``, ``idle time``, ``findings``, ``critical path``, ``replay``, ``plan``).
    ``program``: what a capture recorded of the program (its DataLoaders, autocast, compile, memory:
    :mod:`.program_advice` words the fixes with it).  ``code``: reads a source line for the findings'
    code locations (:mod:`.codeloc`; without it locations carry no code text).

    Example (from the repository root): a loop whose single-process DataLoader stalls the GPU,
    and whose ``loss.item()`` keeps the host from loading the next batch while the GPU computes
    (the replay prices each fix: either saves the 40 ms)::

        >>> import tracekit
        >>> from tracekit.analysis import diagnose
        >>> d = diagnose(tracekit.read_trace("sample_traces/synthetic/dataloader_stall.kineto.json"))
        >>> round(d.step_ms_median, 2), round(d.gpu_utilization, 2), d.complete_steps
        (100.01, 0.6, 8)
        >>> [(f.kind, round(f.ms_per_step, 1)) for f in d.findings]
        [('data_loading', 40.0), ('host_device_sync', 40.0)]
        >>> round(d.breakdown_ms["data_loading"], 1)
        40.0
    """
    events, links = tables.events, tables.links
    phase = progress.phase if progress is not None else _no_phase
    phase("steps")
    steps: Steps = find_steps(events, links)
    # warm-up steps leave the steady-state population (they are no longer ``complete``)
    steps, warmup = find_warmup(events, steps)
    phase("idle time")
    timeline = analyze_timeline(events, links, steps.frame)
    syncs = find_syncs(events, links, steps.frame)
    kstats = kernel_stats(events, links, tables.devices)
    headroom = tuple(memory_headroom(tables.memory, tables.devices)) or memory_from_program(program)

    primary = pl.DataFrame(
        {"rank": list(timeline.primary_device), "device": list(timeline.primary_device.values())},
        schema={"rank": pl.Int32, "device": pl.Int32},
    )
    main_steps = timeline.per_step.join(primary, on=["rank", "device"], how="inner")
    step_table = steps.frame.join(
        main_steps.select("rank", "step", "device", pl.col("busy_ns").alias("gpu_busy_ns")), on=["rank", "step"], how="left"
    ).with_columns((pl.col("gpu_busy_ns") / pl.col("dur_ns")).alias("utilization"))
    complete = step_table.filter(pl.col("complete"))
    complete_main = main_steps.join(complete.select("rank", "step"), on=["rank", "step"], how="semi")
    finding_gaps = timeline.gaps
    host_only = gpu_activity(events).height == 0
    if host_only and complete.height:
        # CPU-only trace: the training thread stands in for the device (analysis/host.py)
        host_steps, finding_gaps = host_breakdown(events, steps.frame)
        complete_main = host_steps.join(complete.select("rank", "step"), on=["rank", "step"], how="semi")

    step_ms_median = _ms(complete["dur_ns"].median()) if complete.height else None
    step_ms_mean = _ms(complete["dur_ns"].mean()) if complete.height else None
    utilization = None
    breakdown: dict[str, float] = {}
    breakdown_ms: dict[str, float] = {}
    if complete_main.height:
        total = float(complete_main["dur_ns"].sum())
        utilization = float(complete_main["busy_ns"].sum()) / total if total and not host_only else None
        # one statistic: every per-step number is stated for the median step (analysis/steady.py)
        for cause in CAUSES:
            value = float(complete_main[f"{cause}_ns"].sum())
            breakdown[cause] = float(value / total) if total else 0.0
            breakdown_ms[cause] = per_median_step(value, total, step_ms_median)
    phase("findings")
    findings = build_findings(
        per_step=complete_main, gaps=finding_gaps, syncs=syncs, kernels=kstats, memory=list(headroom), events=events,
        utilization=utilization, host_only=host_only, step_ms=step_ms_median, windows_ns=int(step_table["dur_ns"].sum() or 0),
    )
    # busy but not efficient: FLOPs, roofline and MFU from recorded shapes
    eff = efficiency(events, links, tables.devices, step_table)
    findings = _without_superseded([*findings, *efficiency_findings(eff, step_ms_median, MIN_SHARE)])
    # the what-if engine prices each finding's fix and the asked what-ifs: the replay where it
    # reproduces the trace, the critical path otherwise; findings are then ranked by what fixing
    # them would save, not by the time they take (the critical path stays the explanation)
    asked = tuple(WhatIf.of(w) for w in what_if)
    priced = answer(
        PricingInputs(
            events=events, links=links, steps=steps.frame, step_ms=step_ms_median, utilization=utilization, host_only=host_only,
            per_step=complete_main, gaps=finding_gaps, syncs=syncs, kernels=kstats, breakdown_ms=breakdown_ms,
            batch_size=_batch_size(program),
        ),
        findings, asked, eff, phase=phase,
    )
    cpath, findings, replay_notes = priced.critical_path, list(priced.findings), priced.notes
    findings = _located(findings, events, links, step_table, syncs, program, host_only, code)
    # the plan's steps carry the findings as located (file:line, the program's own words)
    fix_plan = priced.plan.with_findings(findings)
    return Diagnosis(
        info=tables.info,
        steps=step_table,
        step_sources=steps.sources,
        timeline=timeline,
        syncs=syncs,
        kernels=kstats,
        memory=headroom,
        findings=tuple(findings),
        breakdown=breakdown,
        breakdown_ms=breakdown_ms,
        step_ms_median=step_ms_median,
        step_ms_mean=step_ms_mean,
        gpu_utilization=utilization,
        data_quality=tuple(_data_quality(tables, steps, syncs, warmup)) + (cpath.notes if cpath is not None else ()) + replay_notes,
        devices=tables.devices,
        critical_path=cpath,
        what_ifs=tuple(a for a in (cpath.what_ifs if cpath is not None else ()) if a.what_if in asked),
        efficiency=eff,
        warmup=warmup,
        plan=fix_plan,
    )


def _located(
    findings: Sequence[Finding], events: pl.DataFrame, links: pl.DataFrame, steps: pl.DataFrame, syncs: pl.DataFrame,
    program: ProgramFacts | None, host_only: bool, code: LineSource | None,
) -> list[Finding]:
    """Each finding with the place in the user's code its evidence comes from (the trace's Python
    frames, :mod:`.codeloc`), then with what the program's facts say (:mod:`.program_advice`)."""
    where = finding_locations([f.kind for f in findings], events, links, steps, syncs, code)
    located = [dataclasses.replace(f, location=where[f.kind]) if f.kind in where else f for f in findings]
    if program is None:
        return located
    loading = evidence_count("data_loading", events, links, steps, syncs) if any(f.kind == "data_loading" for f in located) else 0
    return advise(located, program, host_only=host_only, data_points=loading, code=code)


def _batch_size(program: ProgramFacts | None) -> int | None:
    """The training loop's batch size, when the capture recorded its DataLoader (the plan's throughput)."""
    loader = None if program is None else program.training_loader()
    return None if loader is None else loader.batch_size


def _without_superseded(findings: Sequence[Finding]) -> list[Finding]:
    """The findings without the kinds another found kind supersedes (``FindingKind.supersedes``:
    the same cause measured another way, fp32 GEMMs from dtypes over fp32 kernels by name)."""
    gone = {SUPERSEDES[f.kind] for f in findings if f.kind in SUPERSEDES}
    return [f for f in findings if f.kind not in gone]


def _no_phase(name: str, total: int | None = None) -> None:
    del name, total


def _ms(value: Any) -> float | None:
    return None if value is None else float(value) / 1e6


def _data_quality(tables: TraceTables, steps: Steps, syncs: pl.DataFrame, warmup: WarmUp | None = None) -> list[str]:
    ev = tables.events
    kinds = set(tables.kind_counts())
    notes: list[str] = []
    gpu = set(GPU_ACTIVITY_KINDS) & kinds
    cpu = {EventKind.CPU_OP.value, EventKind.ANNOTATION.value, EventKind.RUNTIME.value, EventKind.PYTHON.value} & kinds
    if not gpu:
        notes.append(
            "CPU-only trace: no GPU activity was recorded, so GPU utilization and idle gaps cannot be measured; "
            "the breakdown splits the training thread's step time into data loading and the rest (compute)."
        )
    if gpu and not cpu:
        notes.append("GPU-only trace: no host events were recorded, so idle gaps cannot be attributed to host activity (they stay unattributed).")
    if gpu and tables.links.height == 0 and EventKind.RUNTIME.value in kinds:
        notes.append("GPU work is not linked to its launch calls (no correlation ids); gap causes rely on the main thread's activity.")
    if gpu and EventKind.SYNC.value not in kinds:
        notes.append(
            "No explicit synchronisation events (cuda_sync): sync points are inferred from API and operator names. "
            "Capture with torch.profiler experimental_config=_ExperimentalConfig(enable_cuda_sync_events=True) or nsys --trace=cuda."
        )
    if gpu and EventKind.PYTHON.value not in kinds and syncs.height:
        notes.append("No Python stacks (with_stack=False): sync points name the operator, not the line of Python that caused them.")
    sources = set(steps.sources.values())
    if sources and sources != {"profiler_step"}:
        notes.append("Steps were found from " + ", ".join(sorted(sources)) + " (no ProfilerStep markers).")
    note = warmup.note() if warmup is not None else None
    if note:
        notes.append(note)
    if "warmup" in steps.frame.columns:
        partial = steps.frame.filter(~pl.col("complete") & ~pl.col("warmup")).height
    else:
        partial = steps.frame.filter(~pl.col("complete")).height
    if partial:
        notes.append(f"{partial} partial step window(s) (before the first or after the last boundary) are shown but not counted in medians.")
    if tables.info.truncated:
        notes.append("The trace was truncated; the last step may be incomplete.")
    del ev
    return notes


# --------------------------------------------------------------------------- jobs


def diagnose_job(
    job: Job, *, on_rank: Callable[[int, RankTrace], None] | None = None, code: LineSource | None = None
) -> JobDiagnosis:
    """Diagnose each rank of ``job`` (:func:`tracekit.reading.job.read_job`) and compare the ranks.

    ``on_rank(i, rank)`` is called before the ``i``-th rank is diagnosed (for progress).  Each rank
    is diagnosed with what the capture recorded of its program (``job.program``), and ``code``
    reads the source lines of the findings' locations.
    """
    diagnoses: dict[int, Diagnosis] = {}
    profiles: list[RankProfile] = []
    for i, r in enumerate(job.ranks):
        if on_rank is not None:
            on_rank(i, r)
        d = diagnose(r.tables, program=job.program.get(r.rank), code=code)
        diagnoses[r.rank] = d
        profiles.extend(rank_profiles(r.tables.events, d, r.path))
    multirank = analyze_ranks(profiles, world_size=job.world_size)
    model = job_model(job, diagnoses, profiles) if len(diagnoses) > 1 or (job.world_size or 1) > 1 else None
    if model is not None:
        multirank = dataclasses.replace(multirank, findings=rank_job_findings(multirank.findings, model))
    return JobDiagnosis(job=job, diagnoses=diagnoses, multirank=multirank, model=model)


def job_model(job: Job, diagnoses: Mapping[int, Diagnosis], profiles: Sequence[RankProfile]) -> JobModel:
    """The job model (:mod:`tracekit.analysis.job_replay`) of a diagnosed job."""
    spans = [
        r.tables.events.select(
            pl.lit(r.rank, dtype=pl.Int32).alias("rank"),
            pl.col("start_ns").min(),
            (pl.col("start_ns") + pl.col("dur_ns").fill_null(0)).max().alias("end_ns"),
        )
        for r in job.ranks
        if r.rank in diagnoses and r.tables.events.height
    ]
    windows = pl.concat(spans) if spans else None
    events = {r.rank: r.tables.events for r in job.ranks if r.rank in diagnoses}
    links = {r.rank: r.tables.links for r in job.ranks if r.rank in diagnoses}
    return from_profiles(profiles, diagnoses, world_size=job.world_size, windows=windows, events=events, links=links)


def diagnose_ranks(
    parts: Mapping[int, TraceTables], whole: Diagnosis, whole_tables: TraceTables, source: str
) -> tuple[dict[int, Diagnosis], list[RankProfile]]:
    """Per-rank diagnoses and profiles of one file that may hold several ranks.

    ``parts`` is the file split by rank (:func:`tracekit.reading.job.split_ranks`) and ``whole`` the
    diagnosis of the whole file: a single-rank file is its own rank's diagnosis; a file of
    several ranks is diagnosed rank by rank, as a job's files are.
    """
    if len(parts) == 1:
        rank = next(iter(parts))
        return {rank: whole}, rank_profiles(whole_tables.events, whole, source)
    diagnoses: dict[int, Diagnosis] = {}
    profiles: list[RankProfile] = []
    for r, part in parts.items():
        d = diagnose(part)
        diagnoses[r] = d
        profiles.extend(rank_profiles(part.events, d, source))
    return diagnoses, profiles


__all__ = ["Diagnosis", "JobDiagnosis", "diagnose", "diagnose_job", "diagnose_ranks"]
