"""From a path to a result: the one road every front end takes.

The command line, the terminal UI, the notebook API and the batch worker all get from their
input to a diagnosis through two calls, so they cannot drift apart:

* :func:`load` reads what a path names — a trace file (:class:`TraceInput`), a folder of one
  job's traces or a list of files (:class:`JobInput`), or a folder holding several jobs
  (:class:`FolderInput`); :func:`load_trace` reads one trace file and nothing else (``diff``,
  ``annotate``, ``export``, ``info`` and each trace of a batch);
* :func:`run` diagnoses what was loaded and returns a frozen result: :class:`TraceResult`
  (with the representative step's view, built once on first use), :class:`JobResult` or
  :class:`FolderResult`.  :func:`compare` and :func:`compare_files` put two trace results
  side by side (:class:`Comparison`).

**One rule for a folder.**  A folder is read as :func:`tracekit.reading.job.read_jobs` reads
it: a capture folder (``metadata.json``) or a folder whose files make one job is that job; a
folder whose files group into several jobs is a :class:`FolderInput`.  Each front end decides
what it shows for several jobs (the command line and the notebook API summarise every job; the
terminal UI opens one job and says so).

This module is headless: it imports the readers and the analyses, never a renderer, a front end
or a terminal library, and it prints nothing.  Its inputs and results are compared by identity
(they hold tables, which have no equality that answers yes or no).  Failures are :class:`~tracekit.errors.TracekitError`
subclasses naming the file.  A :class:`~tracekit.progress.Progress` passed in hears the same
phases as when the readers and :func:`~tracekit.analysis.diagnose.diagnose` are called directly.

Example (from the repository root)::

    >>> from tracekit import pipeline
    >>> r = pipeline.run(pipeline.load("sample_traces/synthetic/dataloader_stall.kineto.json"))
    >>> round(r.diagnosis.step_ms_median, 2), r.view().step, r.view() is r.view()
    (100.01, 1, True)
    >>> job = pipeline.run(pipeline.load("sample_traces/captures/ddp_gloo"))
    >>> sorted(job.ranks), job.view().rank
    ([0, 1], 0)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, overload

from .errors import UsageError

if TYPE_CHECKING:
    from .analysis.compare import DiffResult
    from .analysis.job_results import JobDiagnosis
    from .analysis.multirank import RankProfile
    from .analysis.results import Diagnosis
    from .analysis.view import StepView
    from .progress import Progress
    from .reading.job import Job, RankTrace
    from .reading.program import ProgramFacts
    from .reading.source import SourceLines
    from .schema import TraceTables

#: most events drawn in a report's timeline picture (HTML and Markdown reports, the notebook)
MAX_VIEW_EVENTS = 6000

#: what :func:`load` accepts: a trace file, a folder, or a list of trace files (one job)
Source = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
#: told ``(i, rank)`` before the ``i``-th rank of a job is diagnosed
OnRank = Callable[[int, "RankTrace"], None]


# --------------------------------------------------------------------------- what load returns


@dataclass(frozen=True, eq=False)
class TraceInput:
    """One trace file's canonical tables."""

    #: the path as the caller gave it
    source: str
    tables: TraceTables
    #: what the program built, when the file is one rank's trace of a capture folder
    program: ProgramFacts | None = None


@dataclass(frozen=True, eq=False)
class JobInput:
    """The traces of one job, one entry per rank (:class:`tracekit.reading.job.Job`)."""

    #: the folder as the caller gave it (for a list of files: the job's name, their common folder)
    source: str
    job: Job


@dataclass(frozen=True, eq=False)
class FolderInput:
    """A folder whose traces belong to several jobs."""

    #: the folder as the caller gave it
    source: str
    jobs: tuple[Job, ...]

    @property
    def skipped(self) -> tuple[tuple[str, str], ...]:
        """(path, reason) of the folder's files that could not be read as traces."""
        return self.jobs[0].skipped if self.jobs else ()


Loaded = TraceInput | JobInput | FolderInput


def load(source: Source, *, cache: bool = True, progress: Progress | None = None) -> Loaded:
    """Read what ``source`` names (see the module docstring for the rule for a folder).

    ``cache=False`` parses every file again instead of reusing the cached tables.

    Raises:
        tracekit.errors.TracekitError: the path does not exist or cannot be read as traces.
    """
    if not isinstance(source, (str, os.PathLike)):
        if not isinstance(source, Sequence) or not all(isinstance(x, (str, os.PathLike)) for x in source):
            raise UsageError(f"analyze expects a trace path, a folder or a list of trace paths, got {type(source).__name__}")
        from .reading.job import read_job

        job = read_job([Path(x) for x in source], cache=cache, progress=progress)
        return JobInput(job.name, job)
    path = Path(source)
    if not path.is_dir():
        return load_trace(source, cache=cache, progress=progress)
    from .reading.job import read_jobs

    jobs = read_jobs(path, cache=cache, progress=progress)
    if len(jobs) == 1:
        return JobInput(str(path), jobs[0])
    return FolderInput(str(path), tuple(jobs))


def load_trace(
    source: str | os.PathLike[str], *, cache: bool = True, progress: Progress | None = None, subject: str | None = None
) -> TraceInput:
    """Read one trace file; ``progress`` is told ``subject`` (the file's name by default) first."""
    from .reading.job import program_of_trace
    from .reading.trace import read_trace

    path = Path(source)
    if progress is not None:
        progress.subject(path.name if subject is None else subject)
    return TraceInput(os.fspath(source), read_trace(path, cache=cache, progress=progress), program_of_trace(path))


# --------------------------------------------------------------------------- what run returns


@dataclass(frozen=True, eq=False)
class RankSplit:
    """The ranks of one trace file, each diagnosed on its own (a single-rank file: the file's own diagnosis)."""

    #: the file's rank numbers, in the order the file was split
    ranks: tuple[int, ...]
    diagnoses: Mapping[int, Diagnosis]
    #: what the comparison across ranks needs of each rank (empty when the file has no step)
    profiles: tuple[RankProfile, ...]


@dataclass(frozen=True, eq=False)
class TraceResult:
    """One trace diagnosed: the diagnosis, the tables it came from, and step views on demand."""

    #: the path as the caller gave it
    source: str
    tables: TraceTables
    diagnosis: Diagnosis
    _views: dict[tuple[int, int], StepView] = field(default_factory=dict, init=False, repr=False)

    @property
    def path(self) -> str:
        """The trace's path as its tables record it."""
        return self.diagnosis.info.path

    def representative_step(self, rank: int | None = None) -> tuple[int, int] | None:
        """(rank, step) of the complete step closest to the median (of ``rank`` only, when given)."""
        import polars as pl

        from .analysis.view import representative_step

        steps = self.diagnosis.steps
        return representative_step(steps if rank is None else steps.filter(pl.col("rank") == rank))

    def view(self, rank: int | None = None, step: int | None = None) -> StepView | None:
        """The drawable model of a step as the reports draw it (at most :data:`MAX_VIEW_EVENTS`
        events), built once per step: by default the representative step (of ``rank`` when
        given); None when the trace has no step.

        Raises:
            tracekit.errors.UsageError: ``rank`` has no step ``step``.
        """
        if rank is None or step is None:
            pick = self.representative_step(rank)
            if pick is None:
                return None
            rank, step = pick[0], pick[1] if step is None else step
        key = (rank, step)
        if key not in self._views:
            try:
                self._views[key] = self.step_view(rank, step)
            except KeyError:
                raise UsageError(f"the trace has no step {step} on rank {rank}", path=self.path) from None
        return self._views[key]

    def step_view(self, rank: int, step: int, *, max_events: int = MAX_VIEW_EVENTS) -> StepView:
        """The drawable model of (``rank``, ``step``) with at most ``max_events`` events, built
        now and not kept (the terminal UI keeps its own few); KeyError when there is no such step."""
        from .analysis.view import step_view

        d = self.diagnosis
        return step_view(self.tables, d.steps, d.timeline.gaps, d.syncs, rank, step, max_events=max_events)

    def split_ranks(self) -> RankSplit:
        """The file's ranks diagnosed one by one, as a job's files are (the batch's per-rank rows)."""
        from .analysis.diagnose import diagnose_ranks
        from .reading.job import split_ranks

        parts = split_ranks(self.tables)
        diagnoses, profiles = diagnose_ranks(parts, self.diagnosis, self.tables, self.source)
        return RankSplit(tuple(parts), diagnoses, tuple(profiles))


@dataclass(frozen=True, eq=False)
class JobResult:
    """One job diagnosed: every rank, and the comparison across ranks."""

    #: the folder as the caller gave it (for a list of files: the job's name, their common folder)
    source: str
    job_diagnosis: JobDiagnosis

    @property
    def job(self) -> Job:
        return self.job_diagnosis.job

    @cached_property
    def ranks(self) -> dict[int, TraceResult]:
        """rank → that rank's result (its tables and diagnosis), lowest rank first."""
        jd = self.job_diagnosis
        out: dict[int, TraceResult] = {}
        for r in jd.job.ranks:
            if r.rank in jd.diagnoses and r.rank not in out:
                out[r.rank] = TraceResult(r.path, r.tables, jd.diagnoses[r.rank])
        return out

    def view(self) -> StepView | None:
        """The lowest rank's representative step, as the job's HTML report draws it."""
        return self.ranks[min(self.ranks)].view() if self.ranks else None


@dataclass(frozen=True, eq=False)
class FolderResult:
    """Every job of a folder diagnosed."""

    #: the folder as the caller gave it
    folder: str
    jobs: tuple[JobResult, ...]
    #: (path, reason) of the folder's files that could not be read as traces
    skipped: tuple[tuple[str, str], ...] = ()

    @property
    def job_diagnoses(self) -> list[JobDiagnosis]:
        return [j.job_diagnosis for j in self.jobs]


Result = TraceResult | JobResult | FolderResult


@overload
def run(loaded: TraceInput, *, what_ifs: Sequence[Mapping[str, float]] = (), progress: Progress | None = None,
        on_rank: OnRank | None = None) -> TraceResult: ...
@overload
def run(loaded: JobInput, *, what_ifs: Sequence[Mapping[str, float]] = (), progress: Progress | None = None,
        on_rank: OnRank | None = None) -> JobResult: ...
@overload
def run(loaded: FolderInput, *, what_ifs: Sequence[Mapping[str, float]] = (), progress: Progress | None = None,
        on_rank: OnRank | None = None) -> FolderResult: ...
@overload
def run(loaded: Loaded, *, what_ifs: Sequence[Mapping[str, float]] = (), progress: Progress | None = None,
        on_rank: OnRank | None = None) -> Result: ...


def run(
    loaded: Loaded, *, what_ifs: Sequence[Mapping[str, float]] = (), progress: Progress | None = None, on_rank: OnRank | None = None
) -> Result:
    """Diagnose what :func:`load` read.

    Args:
        what_ifs: extra questions for the critical path of one trace, each a mapping cause →
            factor (:func:`tracekit.analysis.whatif.what_if_questions` builds them).
        progress: told the analysis phases of a trace; for a job or a folder, the folder's name
            and one ``analyzing N ranks`` phase.
        on_rank: for a job or a folder, called before each rank is diagnosed.

    Raises:
        tracekit.errors.UsageError: ``what_ifs`` asked of a job or a folder (one trace only).
    """
    from .analysis import diagnose, diagnose_job
    from .reading.source import SourceLines

    if isinstance(loaded, TraceInput):
        code = SourceLines.near([loaded.source])
        return TraceResult(loaded.source, loaded.tables, diagnose(
            loaded.tables, what_if=what_ifs, progress=progress, program=loaded.program, code=code
        ))
    if what_ifs:
        raise UsageError("what-if answers for one trace", path=loaded.source, hint="analyze one rank's file with a what-if")
    jobs = (loaded.job,) if isinstance(loaded, JobInput) else loaded.jobs
    if progress is not None:
        progress.subject(Path(loaded.source).name)
        ranks = sum(len(job.ranks) for job in jobs)
        progress.phase(f"analyzing {ranks} rank{'s' if ranks != 1 else ''}")
    if isinstance(loaded, JobInput):
        return JobResult(loaded.source, diagnose_job(loaded.job, on_rank=on_rank, code=_source_lines(loaded.job)))
    results = tuple(JobResult(job.name, diagnose_job(job, on_rank=on_rank, code=_source_lines(job))) for job in jobs)
    return FolderResult(loaded.source, results, loaded.skipped)


def _source_lines(job: Job) -> SourceLines:
    """The source lines a job's findings may show: files under its traces' folders or the cwd."""
    from .reading.source import SourceLines

    return SourceLines.near([r.path for r in job.ranks])


# --------------------------------------------------------------------------- comparisons


@dataclass(frozen=True, eq=False)
class Comparison:
    """Two traces of the same training loop compared (``tracekit diff``)."""

    #: the deltas (:class:`tracekit.analysis.compare.DiffResult`)
    diff: DiffResult
    before: TraceResult
    after: TraceResult


def compare(before: TraceResult, after: TraceResult) -> Comparison:
    """``before`` and ``after`` side by side."""
    from .analysis.compare import compare as compare_diagnoses

    return Comparison(compare_diagnoses(before.diagnosis, after.diagnosis), before, after)


def compare_files(
    before: str | os.PathLike[str], after: str | os.PathLike[str], *, cache: bool = True, progress: Progress | None = None
) -> Comparison:
    """Two trace files read, diagnosed and compared; ``progress`` hears ``before: NAME`` and
    ``after: NAME`` as it reads and analyses each."""
    sides = [
        run(load_trace(path, cache=cache, progress=progress, subject=f"{label}: {Path(path).name}"), progress=progress)
        for label, path in (("before", before), ("after", after))
    ]
    if progress is not None:
        progress.subject(None)
    return compare(sides[0], sides[1])


__all__ = [
    "MAX_VIEW_EVENTS", "Comparison", "FolderInput", "FolderResult", "JobInput", "JobResult", "Loaded", "RankSplit", "Result",
    "Source", "TraceInput", "TraceResult", "compare", "compare_files", "load", "load_trace", "run",
]
