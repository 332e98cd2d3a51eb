"""tracekit in a notebook or a Python script: one call from a trace to its diagnosis.

:func:`analyze` runs the pipeline of ``tracekit analyze`` (:mod:`tracekit.pipeline`) on a trace
file, a folder holding one job's traces, or a folder holding several jobs; :func:`diff` runs the
one of ``tracekit diff``.  They return small result objects that wrap the pipeline's frozen
results and render on demand through the renderers' table (:func:`tracekit.report.render`):

* in Jupyter (or any frontend that calls ``_repr_html_``) a result shows the report's headline,
  the step-time breakdown, the timeline of the representative step and the findings with their
  fixes: self-contained HTML, no script, nothing fetched from the network;
* ``repr(result)`` is a few readable lines for a plain terminal; ``print(result)`` prints the full
  text report of ``tracekit analyze``;
* the tables are one attribute away as polars DataFrames (``.findings``, ``.steps``, ``.gaps``,
  ``.syncs``, ``.kernels``, ``.what_ifs``; columns in docs/python-api.md);
* ``.to_json()`` is byte for byte the document ``tracekit analyze --format json`` prints
  (docs/json-report.md), ``.to_text()``, ``.to_markdown()`` and ``.to_html()`` the other formats
  (each is ``.render(fmt)``), ``.save(path)`` writes the one its suffix names.

This module is a front end, like the command line: it may import the renderers
(:mod:`tracekit.report`); the analyses never do.  Nothing here prints.

Example (from the repository root)::

    >>> import tracekit
    >>> r = tracekit.analyze("sample_traces/synthetic/dataloader_stall.kineto.json")
    >>> round(r.step_ms, 2), round(r.gpu_utilization, 2)
    (100.01, 0.6)
    >>> r.findings.select("kind", pl.col("ms_per_step").round(1), pl.col("predicted_step_ms").round(1)).rows()
    [('data_loading', 40.0, 60.0), ('host_device_sync', 40.0, 60.0)]
    >>> stalls = r.gaps.filter(pl.col("cause") == "data_loading")
    >>> stalls.height, stalls.select((pl.col("dur_ns") / 1e6).round(1).unique()).item()
    (8, 40.0)
    >>> import json
    >>> json.loads(r.to_json())["summary"]["top_finding"]
    'data_loading'
    >>> d = tracekit.diff(r, "sample_traces/synthetic/dataloader_fixed.kineto.json")
    >>> d.verdict, round(d.step_ms.delta_pct)
    ('faster', -38)
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import polars as pl

from .analysis.whatif import WhatIfSpec, what_if_questions
from .errors import UsageError

if TYPE_CHECKING:
    from .analysis.compare import Change, DiffResult
    from .analysis.job_results import JobDiagnosis
    from .analysis.results import Diagnosis
    from .analysis.view import StepView
    from .pipeline import Comparison, FolderResult, JobResult, Result, TraceResult
    from .reading.job import Job
    from .schema import TraceInfo, TraceTables

_FINDING_SCHEMA: dict[str, Any] = {
    "kind": pl.String,
    "title": pl.String,
    "ms_per_step": pl.Float64,
    "share_of_step": pl.Float64,
    "predicted_step_ms": pl.Float64,
    "saving_ms": pl.Float64,
    "steps_affected": pl.Int64,
    "worst_steps": pl.List(pl.Int64),
    "fix": pl.String,
    "evidence": pl.String,
}
_WHAT_IF_SCHEMA: dict[str, Any] = {
    "what_if": pl.String,
    "asked": pl.Boolean,
    "findings": pl.List(pl.String),
    "baseline_step_ms": pl.Float64,
    "predicted_step_ms": pl.Float64,
    "saving_ms": pl.Float64,
}


# --------------------------------------------------------------------------- the calls


def analyze(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *, what_if: WhatIfSpec | None = None, cache: bool = True
) -> TraceReport | JobReport | FolderReport:
    """The diagnosis of a trace, of a job, or of every job in a folder (``tracekit analyze``).

    Args:
        path: a trace file (PyTorch profiler ``.json``/``.json.gz``, Nsight Systems ``.sqlite``/
            ``.nsys-rep``) → :class:`TraceReport`; a folder of one job's traces (a ``tracekit
            capture`` folder, one trace per rank) or a list of files → :class:`JobReport`; a
            folder holding several jobs → :class:`FolderReport`, one :class:`JobReport` per job.
        what_if: extra questions for the critical path of one trace, as ``--what-if``:
            ``"data_loading=0"``, a list of such strings, or ``{"data_loading": 0}``; each cause
            is asked alone and, when there are several, together (:func:`what_if_questions`).
        cache: reuse the parsed tables cached next to the trace (``--no-cache`` is ``cache=False``).

    Raises:
        tracekit.errors.TracekitError: the path does not exist or cannot be read as traces (the
            message names the file and the problem), or ``what_if`` is asked of a folder.
    """
    from . import pipeline

    questions = what_if_questions(what_if)
    if questions and _names_a_job(path):  # refused before anything is read
        where = Path(path) if isinstance(path, (str, os.PathLike)) else None
        raise UsageError("what_if answers for one trace", path=where, hint="analyze one rank's file with what_if=")
    result = pipeline.run(pipeline.load(path, cache=cache), what_ifs=questions)
    if isinstance(result, pipeline.TraceResult):
        return TraceReport(result)
    if isinstance(result, pipeline.JobResult):
        return JobReport(result)
    return FolderReport(result)


def _names_a_job(path: object) -> bool:
    """Whether ``path`` is a folder or a list of trace paths (what the pipeline reads as jobs)."""
    if isinstance(path, (str, os.PathLike)):
        return Path(path).is_dir()
    return isinstance(path, Sequence) and all(isinstance(x, (str, os.PathLike)) for x in path)


def diff(before: str | Path | TraceReport, after: str | Path | TraceReport, *, cache: bool = True) -> DiffReport:
    """What a change did: two traces of the same training loop compared (``tracekit diff``).

    ``before`` and ``after`` are trace files or :class:`TraceReport` results of :func:`analyze`.
    """
    from . import pipeline

    sides = [_as_trace_report(x, cache=cache) for x in (before, after)]
    return DiffReport(pipeline.compare(sides[0].result, sides[1].result), sides[0], sides[1])


def _as_trace_report(x: str | Path | TraceReport, *, cache: bool) -> TraceReport:
    if isinstance(x, TraceReport):
        return x
    if isinstance(x, (JobReport, FolderReport)):
        raise UsageError("diff compares two traces, not jobs", hint="pass one rank's file, e.g. job.ranks[0]")
    if not isinstance(x, (str, Path)):
        raise UsageError(f"diff expects a trace path or a TraceReport, got {type(x).__name__}")
    from . import pipeline

    return TraceReport(pipeline.run(pipeline.load_trace(x, cache=cache)))


# --------------------------------------------------------------------------- shared behaviour


class _Rendered(ABC):
    """What every result shares: its renderings (one table of renderers, :func:`tracekit.report.render`)
    and writing one to a file."""

    @property
    @abstractmethod
    def _result(self) -> Result | Comparison:
        """The pipeline's result this report shows."""

    def render(self, fmt: str = "text", **options: Any) -> str:
        """The report in ``fmt``: ``text``, ``json``, ``markdown``, ``html`` or ``fragment`` (the
        notebook display); the same bytes as the matching ``tracekit`` command's ``--format``."""
        from .report import render

        return render(self._result, fmt, **options)

    def to_dict(self) -> dict[str, Any]:
        """The JSON document as Python objects."""
        from .report import document

        return document(self._result)

    def to_json(self) -> str:
        """The JSON document of the matching ``tracekit`` command's ``--format json``."""
        return self.render("json")

    def to_text(self) -> str:
        """The terminal report of the matching command."""
        return self.render("text")

    def to_markdown(self) -> str:
        """The Markdown of ``--format markdown``."""
        return self.render("markdown")

    def to_html(self) -> str:
        """The self-contained page of ``--format html``."""
        return self.render("html")

    def save(self, path: str | Path) -> Path:
        """Write the report to ``path`` in the format its suffix names (``.html``, ``.json``, ``.md``,
        anything else text); returns the path."""
        from .report import format_for

        out = Path(path)
        text = self.render(format_for(out))
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write the report: {exc.strerror or exc}", path=out) from exc
        return out

    def __str__(self) -> str:
        return self.to_text()

    def _repr_html_(self) -> str:
        return self.render("fragment")

    def _repr_markdown_(self) -> str:
        return self.to_markdown()


#: :attr:`TraceReport.plan`'s columns
_PLAN_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "kind": pl.String, "action": pl.String, "predicted_step_ms": pl.Float64, "saves_ms": pl.Float64, "saves_alone_ms": pl.Float64,
    "gpu_utilization": pl.Float64, "throughput_per_s": pl.Float64, "alternatives": pl.List(pl.String),
}


def _findings_frame(findings: Sequence[Any], baseline_ms: float | None) -> pl.DataFrame:
    rows = [
        {
            "kind": f.kind,
            "title": f.title,
            "ms_per_step": round(f.ms_per_step, 4),
            "share_of_step": round(f.share_of_step, 4),
            "predicted_step_ms": None if f.predicted_step_ms is None else round(f.predicted_step_ms, 4),
            "saving_ms": None if f.predicted_step_ms is None or baseline_ms is None else round(baseline_ms - f.predicted_step_ms, 4),
            "steps_affected": f.steps_affected,
            "worst_steps": list(f.worst_steps),
            "fix": f.fix,
            "evidence": json.dumps(f.evidence, sort_keys=True, default=str),
        }
        for f in findings
    ]
    return pl.DataFrame(rows, schema=_FINDING_SCHEMA)


def _with_rank(frame: pl.DataFrame, rank: int | None) -> pl.DataFrame:
    if "rank" in frame.columns:
        return frame
    return frame.select(pl.lit(rank, dtype=pl.Int32).alias("rank"), pl.all())


def _concat(frames: Sequence[pl.DataFrame]) -> pl.DataFrame:
    frames = [f for f in frames if f.width]
    if not frames:
        return pl.DataFrame()
    return pl.concat(frames, how="diagonal_relaxed")


# --------------------------------------------------------------------------- one trace


class TraceReport(_Rendered):
    """The diagnosis of one trace (:func:`analyze` on a file), with its tables and renderings.

    Attributes:
        diagnosis: the frozen :class:`tracekit.analysis.Diagnosis` (every number shown comes from it).
        tables: the trace's canonical tables (:class:`tracekit.schema.TraceTables`).
        result: the pipeline's :class:`tracekit.pipeline.TraceResult` holding both.
    """

    def __init__(self, result: TraceResult) -> None:
        #: the pipeline's result (:class:`tracekit.pipeline.TraceResult`)
        self.result = result
        self._memo: dict[str, Any] = {}

    @property
    def _result(self) -> TraceResult:
        return self.result

    @property
    def diagnosis(self) -> Diagnosis:
        return self.result.diagnosis

    @property
    def tables(self) -> TraceTables:
        return self.result.tables

    # -- the headline numbers
    @property
    def info(self) -> TraceInfo:
        return self.diagnosis.info

    @property
    def path(self) -> str:
        return self.diagnosis.info.path

    @property
    def step_ms(self) -> float | None:
        """Median step time over complete steps, ms."""
        return self.diagnosis.step_ms_median

    @property
    def gpu_utilization(self) -> float | None:
        """Busy share of step time (0..1) of each rank's busiest GPU; None for a CPU-only trace."""
        return self.diagnosis.gpu_utilization

    @property
    def breakdown_ms(self) -> dict[str, float]:
        """Cause → ms per step (the parts add up to the step)."""
        return dict(self.diagnosis.breakdown_ms)

    @property
    def answer(self) -> str | None:
        """The report's opening sentence: the main cause, its cost, the first fix and the step
        before → after (None: the trace has no step time)."""
        return self.diagnosis.plan.sentence()

    # -- the tables
    @property
    def plan(self) -> pl.DataFrame:
        """The fix plan, one row per step in the order to make them: ``kind``, ``action``,
        ``predicted_step_ms`` (with this and every earlier step applied), ``saves_ms``,
        ``saves_alone_ms``, ``gpu_utilization`` (after it), ``throughput_per_s``,
        ``alternatives`` (kinds that save about the same instead); empty when nothing is worth
        fixing (``diagnosis.plan.note`` says when it was not priced)."""
        if "plan" not in self._memo:
            rows = [
                {k: v for k, v in st.to_dict().items() if k in _PLAN_SCHEMA} for st in self.diagnosis.plan.steps
            ]
            self._memo["plan"] = pl.DataFrame(rows, schema=_PLAN_SCHEMA)
        return self._memo["plan"]  # type: ignore[no-any-return]

    @property
    def findings(self) -> pl.DataFrame:
        """One row per finding, ranked by what its fix saves: ``kind``, ``title``, ``ms_per_step``,
        ``share_of_step``, ``predicted_step_ms``, ``saving_ms``, ``steps_affected``, ``worst_steps``,
        ``fix``, ``evidence`` (a JSON object, kind-specific)."""
        if "findings" not in self._memo:
            self._memo["findings"] = _findings_frame(self.diagnosis.findings, self.diagnosis.step_ms_mean)
        return self._memo["findings"]  # type: ignore[no-any-return]

    @property
    def steps(self) -> pl.DataFrame:
        """One row per step window: ``rank``, ``step``, ``start_ns``, ``end_ns``, ``dur_ns``, ``cpu_end_ns``,
        ``complete``, ``source``, ``device``, ``gpu_busy_ns``, ``utilization`` and, for the step's
        GPU, one ``<cause>_ns`` column per cause of the breakdown."""
        if "steps" not in self._memo:
            from .analysis import CAUSES

            d = self.diagnosis
            causes = d.timeline.per_step.select("rank", "device", "step", *(f"{c}_ns" for c in CAUSES))
            self._memo["steps"] = d.steps.join(causes, on=["rank", "device", "step"], how="left").sort("rank", "step")
        return self._memo["steps"]  # type: ignore[no-any-return]

    @property
    def gaps(self) -> pl.DataFrame:
        """One row per idle gap of a GPU inside a step: ``rank``, ``device``, ``step``, ``start_ns``,
        ``end_ns``, ``dur_ns``, ``cause`` (what the host was doing), ``host_pid``, ``host_tid``,
        ``next_event_id``, ``launch_event_id``, ``sync_event_id`` and the gap split by cause
        (``<cause>_ns``)."""
        return self.diagnosis.timeline.gaps

    @property
    def syncs(self) -> pl.DataFrame:
        """One row per host-device sync point (:mod:`tracekit.analysis.syncs`)."""
        return self.diagnosis.syncs

    @property
    def kernels(self) -> pl.DataFrame:
        """Every kernel name, by total GPU time: ``name``, ``category``, ``tensor_cores``, ``count``,
        ``total_ns``, ``mean_ns``, ``max_ns``, ``share_of_kernel_time``."""
        if "kernels" not in self._memo:
            from .analysis.kernels import kernel_stats

            t = self.tables
            self._memo["kernels"] = kernel_stats(t.events, t.links, t.devices, top_n=2**31 - 1).top
        return self._memo["kernels"]  # type: ignore[no-any-return]

    @property
    def what_ifs(self) -> pl.DataFrame:
        """Every question the critical path answered: ``what_if`` (``cause=factor, ...``), ``asked``
        (given in ``what_if=``), ``findings`` (the findings whose fix it prices), ``baseline_step_ms``,
        ``predicted_step_ms``, ``saving_ms`` (mean over complete steps)."""
        if "what_ifs" not in self._memo:
            from .analysis.whatif import finding_what_if

            d = self.diagnosis
            asked = {r.what_if for r in d.what_ifs}
            priced: dict[Any, list[str]] = {}
            for f in d.findings:
                wi = finding_what_if(f.kind)
                if wi is not None:
                    priced.setdefault(wi, []).append(f.kind)
            answers = d.critical_path.what_ifs if d.critical_path is not None else ()
            rows = [
                {
                    "what_if": a.what_if.label,
                    "asked": a.what_if in asked,
                    "findings": priced.get(a.what_if, []),
                    "baseline_step_ms": a.baseline_step_ms,
                    "predicted_step_ms": a.predicted_step_ms,
                    "saving_ms": a.saving_ms,
                }
                for a in answers
            ]
            self._memo["what_ifs"] = pl.DataFrame(rows, schema=_WHAT_IF_SCHEMA)
        return self._memo["what_ifs"]  # type: ignore[no-any-return]

    # -- pictures
    def view(self, rank: int | None = None, step: int | None = None) -> StepView | None:
        """The drawable model of one step (default: the complete step closest to the median);
        None when the trace has no step."""
        return self.result.view(rank, step)

    # -- renderings
    def to_markdown(self, image: str | None = None) -> str:
        """The Markdown report (``--format markdown``); ``image`` adds a picture by URL."""
        return self.render("markdown", image=image)

    def __repr__(self) -> str:
        from .report.formatting import headline
        from .report.json_report import to_json_dict

        d = self.diagnosis
        lines = [f"TraceReport({self.path!r})", *(f"  {line}" for line in headline(d, to_json_dict(d)))]
        if self.answer:
            lines.append(f"  {self.answer}")
        lines.extend(_finding_lines(d.findings))
        lines.append("  tables: .plan .findings .steps .gaps .syncs .kernels .what_ifs · print() for the full report")
        return "\n".join(lines)


def _finding_lines(findings: Sequence[Any], indent: str = "  ") -> list[str]:
    if not findings:
        return [f"{indent}no findings"]
    out = []
    for i, f in enumerate(findings, 1):
        line = f"{indent}{i}. {f.title} [{f.kind}]: {f.ms_per_step:,.2f} ms per step ({100 * f.share_of_step:.1f}%)"
        if f.predicted_step_ms is not None:
            line += f", {f.predicted_step_ms:,.2f} ms per step if fixed"
        out.append(line)
    return out


# --------------------------------------------------------------------------- one job


class JobReport(_Rendered):
    """One job of ranks (:func:`analyze` on a folder of one job's traces): every rank diagnosed, and
    the comparison across ranks (stragglers, imbalance, exposed communication).

    The tables hold every rank's rows (a ``rank`` column tells them apart); ``.findings`` also
    holds the findings across ranks, with a null ``rank``.
    """

    def __init__(self, result: JobResult) -> None:
        #: the pipeline's result (:class:`tracekit.pipeline.JobResult`)
        self.result = result
        self._memo: dict[str, Any] = {}

    @property
    def _result(self) -> JobResult:
        return self.result

    @property
    def job_diagnosis(self) -> JobDiagnosis:
        return self.result.job_diagnosis

    @property
    def job(self) -> Job:
        return self.job_diagnosis.job

    @property
    def name(self) -> str:
        return self.job_diagnosis.job.name

    @property
    def ranks(self) -> dict[int, TraceReport]:
        """rank → that rank's :class:`TraceReport`."""
        if "ranks" not in self._memo:
            self._memo["ranks"] = {rank: TraceReport(r) for rank, r in self.result.ranks.items()}
        return self._memo["ranks"]  # type: ignore[no-any-return]

    @property
    def step_ms(self) -> float | None:
        """Median time of the steps aligned across ranks (one rank: its median step time), ms."""
        m = self.job_diagnosis.multirank.step_ms_median
        if m is None and len(self.ranks) == 1:
            return next(iter(self.ranks.values())).step_ms
        return m

    @property
    def per_rank(self) -> pl.DataFrame:
        """One row per rank: step time, GPU utilization, compute, communication, lateness (ms per step)."""
        return self.job_diagnosis.multirank.per_rank

    @property
    def findings(self) -> pl.DataFrame:
        """Findings across ranks (``rank`` null) then each rank's own, with the columns of
        :attr:`TraceReport.findings` and ``rank`` first."""
        jd = self.job_diagnosis
        first = _with_rank(_findings_frame(jd.multirank.findings, None), None)
        return pl.concat([first, *(_with_rank(r.findings, k) for k, r in sorted(self.ranks.items()))], how="vertical_relaxed")

    def _stack(self, name: str) -> pl.DataFrame:
        return _concat([_with_rank(getattr(r, name), k) for k, r in sorted(self.ranks.items())])

    @property
    def steps(self) -> pl.DataFrame:
        """Every rank's :attr:`TraceReport.steps`."""
        return self._stack("steps")

    @property
    def gaps(self) -> pl.DataFrame:
        """Every rank's :attr:`TraceReport.gaps`."""
        return self._stack("gaps")

    @property
    def syncs(self) -> pl.DataFrame:
        """Every rank's :attr:`TraceReport.syncs`."""
        return self._stack("syncs")

    @property
    def kernels(self) -> pl.DataFrame:
        """Every rank's :attr:`TraceReport.kernels`, with a ``rank`` column."""
        return self._stack("kernels")

    @property
    def what_ifs(self) -> pl.DataFrame:
        """Every rank's :attr:`TraceReport.what_ifs`, with a ``rank`` column."""
        return self._stack("what_ifs")

    def __repr__(self) -> str:
        from .report.formatting import job_lines

        head, _ = job_lines(self.job_diagnosis)
        jd = self.job_diagnosis
        lines = [f"JobReport({self.name!r})", f"  {head[1]}"]
        if len(jd.diagnoses) > 1:
            lines.append("  findings across ranks:")
            lines.extend(_finding_lines(jd.multirank.findings, "    "))
        for rank in sorted(jd.diagnoses):
            d = jd.diagnoses[rank]
            top = f"{d.findings[0].kind} ({d.findings[0].ms_per_step:,.2f} ms per step)" if d.findings else "none"
            step = "n/a" if d.step_ms_median is None else f"{d.step_ms_median:,.2f} ms"
            util = "n/a" if d.gpu_utilization is None else f"{100 * d.gpu_utilization:.1f}%"
            lines.append(f"  rank {rank}: step {step}, GPU utilization {util}, largest finding {top}")
        lines.append("  tables: .findings .steps .gaps .syncs .kernels .what_ifs .per_rank · .ranks[r] for one rank")
        return "\n".join(lines)


# --------------------------------------------------------------------------- several jobs


class FolderReport(_Rendered, Sequence[JobReport]):
    """Every job in one folder (:func:`analyze` on a folder of several jobs): a sequence of
    :class:`JobReport`, also indexable by job name (as listed in ``.summary``)."""

    def __init__(self, result: FolderResult) -> None:
        #: the pipeline's result (:class:`tracekit.pipeline.FolderResult`)
        self.result = result
        self.folder = result.folder
        self.jobs = tuple(JobReport(j) for j in result.jobs)
        #: (path, reason) of the folder's files that could not be read as traces
        self.skipped = result.skipped

    @property
    def _result(self) -> FolderResult:
        return self.result

    def __len__(self) -> int:
        return len(self.jobs)

    @overload
    def __getitem__(self, key: int | str) -> JobReport: ...
    @overload
    def __getitem__(self, key: slice) -> Sequence[JobReport]: ...

    def __getitem__(self, key: int | str | slice) -> JobReport | Sequence[JobReport]:
        if isinstance(key, str):
            for job in self.jobs:
                if key in (job.name, self._label(job)):
                    return job
            raise KeyError(f"no job {key!r} in {self.folder} (jobs: {', '.join(self._label(j) for j in self.jobs)})")
        return self.jobs[key]

    def __iter__(self) -> Iterator[JobReport]:
        return iter(self.jobs)

    def _label(self, job: JobReport) -> str:
        prefix = self.folder.rstrip("/") + "/"
        return job.name[len(prefix):] if job.name.startswith(prefix) else job.name

    @property
    def summary(self) -> pl.DataFrame:
        """One row per job: ``job``, ``ranks``, ``complete_steps`` (lowest rank), ``step_ms``,
        ``gpu_utilization`` (lowest rank), ``top_finding``, ``top_finding_ms_per_step``."""
        rows = []
        for job in self.jobs:
            jd = job.job_diagnosis
            first = jd.diagnoses[min(jd.diagnoses)]
            top = (jd.multirank.findings or first.findings or (None,))[0]
            rows.append({
                "job": self._label(job), "ranks": len(jd.diagnoses), "complete_steps": first.complete_steps,
                "step_ms": job.step_ms, "gpu_utilization": first.gpu_utilization,
                "top_finding": None if top is None else top.kind,
                "top_finding_ms_per_step": None if top is None else top.ms_per_step,
            })
        schema = {"job": pl.String, "ranks": pl.Int64, "complete_steps": pl.Int64, "step_ms": pl.Float64,
                  "gpu_utilization": pl.Float64, "top_finding": pl.String, "top_finding_ms_per_step": pl.Float64}
        return pl.DataFrame(rows, schema=schema)

    def _stack(self, name: str) -> pl.DataFrame:
        frames = [(self._label(j), getattr(j, name)) for j in self.jobs]
        return _concat([f.select(pl.lit(label).alias("job"), pl.all()) for label, f in frames if f.width])

    @property
    def findings(self) -> pl.DataFrame:
        """Every job's :attr:`JobReport.findings`, with a ``job`` column first."""
        return self._stack("findings")

    @property
    def steps(self) -> pl.DataFrame:
        return self._stack("steps")

    @property
    def gaps(self) -> pl.DataFrame:
        return self._stack("gaps")

    @property
    def syncs(self) -> pl.DataFrame:
        return self._stack("syncs")

    @property
    def kernels(self) -> pl.DataFrame:
        return self._stack("kernels")

    @property
    def what_ifs(self) -> pl.DataFrame:
        return self._stack("what_ifs")

    def __repr__(self) -> str:
        lines = [f"FolderReport({self.folder!r}): {len(self.jobs)} jobs"]
        for row in self.summary.iter_rows(named=True):
            step = "n/a" if row["step_ms"] is None else f"{row['step_ms']:,.2f} ms"
            top = row["top_finding"] or "no findings"
            lines.append(f"  {row['job']}: {row['ranks']} rank(s), step {step}, {top}")
        lines.append("  .summary, .findings; report[i] or report['name'] for one job")
        return "\n".join(lines)


# --------------------------------------------------------------------------- a comparison


class DiffReport(_Rendered):
    """Two traces of the same training loop compared (:func:`diff`): ``result`` holds the deltas
    (:class:`tracekit.analysis.compare.DiffResult`), ``before`` and ``after`` each trace's report."""

    def __init__(self, comparison: Comparison, before: TraceReport, after: TraceReport) -> None:
        #: the pipeline's comparison (:class:`tracekit.pipeline.Comparison`)
        self.comparison = comparison
        self.result: DiffResult = comparison.diff
        self.before = before
        self.after = after

    @property
    def _result(self) -> Comparison:
        return self.comparison

    @property
    def verdict(self) -> str:
        """``faster``, ``slower``, ``unchanged`` or ``unknown``."""
        return self.result.verdict

    @property
    def step_ms(self) -> Change:
        """The median step time before and after (``.before``, ``.after``, ``.delta``, ``.delta_pct``)."""
        return self.result.step_ms

    @property
    def causes(self) -> pl.DataFrame:
        """One row per cause: ``cause``, ``before_ms``, ``after_ms``, ``delta_ms`` (ms per step),
        ``before_share``, ``after_share``."""
        rows = [
            {"cause": c.cause, "before_ms": c.ms_per_step.before, "after_ms": c.ms_per_step.after, "delta_ms": c.ms_per_step.delta,
             "before_share": c.share.before, "after_share": c.share.after}
            for c in self.result.causes
        ]
        schema = {"cause": pl.String, "before_ms": pl.Float64, "after_ms": pl.Float64, "delta_ms": pl.Float64,
                  "before_share": pl.Float64, "after_share": pl.Float64}
        return pl.DataFrame(rows, schema=schema)

    @property
    def findings(self) -> pl.DataFrame:
        """One row per finding of either trace: ``kind``, ``title``, ``status`` (fixed, new, better,
        worse, unchanged), ``before_ms``, ``after_ms``, ``delta_ms`` (ms per step),
        ``predicted_before_ms``, ``predicted_after_ms``, ``fix``."""
        rows = [
            {"kind": f.kind, "title": f.title, "status": f.status, "before_ms": f.ms_per_step.before,
             "after_ms": f.ms_per_step.after, "delta_ms": f.ms_per_step.delta,
             "predicted_before_ms": f.predicted_step_ms.before, "predicted_after_ms": f.predicted_step_ms.after, "fix": f.fix}
            for f in self.result.findings
        ]
        schema = {"kind": pl.String, "title": pl.String, "status": pl.String, "before_ms": pl.Float64, "after_ms": pl.Float64,
                  "delta_ms": pl.Float64, "predicted_before_ms": pl.Float64, "predicted_after_ms": pl.Float64, "fix": pl.String}
        return pl.DataFrame(rows, schema=schema)

    @property
    def kernels(self) -> pl.DataFrame:
        """The top kernels of either trace: ``name``, ``category``, ``before_ms``, ``after_ms``,
        ``delta_ms`` (ms per step; null where not among that trace's top kernels)."""
        rows = [
            {"name": k.name, "category": k.category, "before_ms": k.ms_per_step.before, "after_ms": k.ms_per_step.after,
             "delta_ms": k.ms_per_step.delta}
            for k in self.result.kernels
        ]
        schema = {"name": pl.String, "category": pl.String, "before_ms": pl.Float64, "after_ms": pl.Float64, "delta_ms": pl.Float64}
        return pl.DataFrame(rows, schema=schema)

    def __repr__(self) -> str:
        from .report.diff import diff_headline

        r = self.result
        lines = [f"DiffReport({r.before.path!r} -> {r.after.path!r})", f"  {diff_headline(r)}"]
        for f in r.findings:
            m = f.ms_per_step
            b = "—" if m.before is None else f"{m.before:,.2f}"
            a = "—" if m.after is None else f"{m.after:,.2f}"
            lines.append(f"  {f.status}: {f.title} [{f.kind}] {b} -> {a} ms per step")
        lines.append("  tables: .causes .findings .kernels · .before/.after for each trace · print() for the full comparison")
        return "\n".join(lines)


__all__ = ["DiffReport", "FolderReport", "JobReport", "TraceReport", "WhatIfSpec", "analyze", "diff", "what_if_questions"]
