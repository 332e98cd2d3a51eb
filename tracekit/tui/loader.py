"""What ``tracekit tui PATH`` opens: one loader that dispatches on the kind of input.

:func:`load_session` turns a path into a :class:`~tracekit.tui.session.Session` — one or more
traces, each a :class:`~tracekit.pipeline.TraceResult` with its display frames — and reports
progress through a callback, so the app can run it in a worker and draw a progress bar.  Every
trace file and folder is read and diagnosed by :mod:`tracekit.pipeline`, as ``tracekit analyze``
reads it.  Nothing here imports Textual: the loader is plain Python on top of the headless core,
and every failure is a :class:`~tracekit.errors.TracekitError` naming the path and the problem.

Inputs (see :func:`detect_input`):

* a trace file (Kineto ``.json``/``.json.gz``, Nsight ``.sqlite``/``.nsys-rep``);
* a capture folder (``metadata.json`` beside ``rank{R}.*.pt.trace.json[.gz]`` files), or any
  folder of one job's traces: every rank of the job.  A folder is read by the pipeline's one rule
  (:func:`tracekit.pipeline.load`); one whose traces belong to several jobs is refused with the
  list of its jobs (``tracekit analyze FOLDER`` summarises them);
* a batch output folder (``traces.parquet``, ``findings.parquet``, ``jobs.parquet``): its
  listing of traces (:attr:`Session.catalog`), with the trace that wasted the most GPU time
  opened first; others open on demand (:func:`load_batch_trace`) from the paths it records.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from .. import pipeline
from ..errors import TraceCorruptError, TraceFormatError, TraceNotFoundError, UsageError
from ..progress import Progress as PhaseProgress
from ..progress import ProgressState, describe
from ..reading.job import is_trace_name
from .model import display_frames
from .session import InputKind, LoadedTrace, Session

#: progress callback: fraction done in [0, 1] and what is happening, in words
Progress = Callable[[float, str], None]

BATCH_FILES = ("traces.parquet", "findings.parquet", "jobs.parquet")


def detect_input(path: str | Path) -> InputKind:
    """Which kind of input ``path`` is.

    Raises:
        TraceNotFoundError: nothing exists at ``path``.
        TraceFormatError: a folder that is neither a capture folder nor a batch output.
    """
    p = Path(path)
    if not p.exists():
        raise TraceNotFoundError("no such file or folder", path=p)
    if not p.is_dir():
        return InputKind.TRACE
    if any((p / name).is_file() for name in BATCH_FILES):
        return InputKind.BATCH
    if (p / "metadata.json").is_file() or any(c.is_file() and is_trace_name(c.name) for c in p.iterdir()):
        return InputKind.CAPTURE
    raise TraceFormatError(
        "this folder is neither a capture folder (metadata.json and rank*.pt.trace.json.gz files) "
        "nor a batch output (traces.parquet, findings.parquet, jobs.parquet)",
        path=p,
        hint="pass a trace file, a folder written by `tracekit capture`, or one written by `tracekit batch`",
    )


def load_session(path: str | Path, progress: Progress | None = None, *, cache: bool = True) -> Session:
    """Read and diagnose everything behind ``path`` (see the module docstring)."""
    report: Progress = progress or (lambda _f, _m: None)
    kind = detect_input(path)
    if kind is InputKind.TRACE:
        trace = _load_file(Path(path), Path(path).name, report, 0.0, 1.0, cache)
        report(1.0, "ready")
        return Session(source=str(path), kind=kind, traces=(trace,))
    if kind is InputKind.CAPTURE:
        return _load_capture(Path(path), report, cache)
    return _load_batch(Path(path), report, cache)


#: where each phase of reading and analysing one trace starts and ends on the loading bar
_PHASE_SPANS = {
    "hashing": (0.0, 0.1), "loading cached tables": (0.1, 0.15), "exporting with nsys": (0.1, 0.2),
    "reading": (0.15, 0.5), "decoding": (0.5, 0.55), "caching": (0.55, 0.6),
    "steps": (0.6, 0.65), "idle time": (0.65, 0.75), "findings": (0.75, 0.8), "critical path": (0.8, 0.9),
    "replay": (0.9, 0.94), "plan": (0.94, 0.96),
}


class _PhaseReport:
    """Turns :class:`tracekit.progress.ProgressState` updates into (fraction, words) for the bar, at most 10 a second."""

    def __init__(self, report: Progress, lo: float, hi: float, interval_s: float = 0.1, *, words_only: bool = False) -> None:
        self._report, self._lo, self._span, self._interval = report, lo, hi - lo, interval_s
        self._words_only = words_only  # several files: the bar stays at lo, the words follow each file
        self._last = (-1.0, "")

    def __call__(self, state: ProgressState) -> None:
        a, b = (0.0, 0.0) if self._words_only else _PHASE_SPANS.get(state.phase, (0.0, 0.0))
        fraction = self._lo + self._span * (a + (b - a) * (state.fraction or 0.0))
        at, phase = self._last
        if phase == state.phase and state.elapsed_s - at < self._interval:
            return
        self._last = (state.elapsed_s, state.phase)
        self._report(fraction, describe(state))


def _load_file(path: Path, name: str, report: Progress, lo: float, hi: float, cache: bool) -> LoadedTrace:
    span = hi - lo
    report(lo, f"reading {path.name}")
    progress = PhaseProgress(on_update=_PhaseReport(report, lo, hi))
    result = pipeline.run(pipeline.load_trace(path, cache=cache, progress=progress), progress=progress)
    report(lo + 0.95 * span, f"preparing the tables of {path.name}")
    trace = prepare_trace(name, str(path), result)
    report(hi, f"analysed {path.name}")
    return trace


def prepare_trace(name: str, path: str, result: pipeline.TraceResult) -> LoadedTrace:
    """A loaded trace with its display frames computed now (in the loading worker), not on first view."""
    return LoadedTrace(name=name, path=path, result=result, frames=display_frames(result.diagnosis))


def _load_capture(folder: Path, report: Progress, cache: bool) -> Session:
    """A capture folder (or any folder of one job's traces): every rank of its job."""
    report(0.02, f"reading the traces in {folder.name}")
    loaded = pipeline.load(folder, cache=cache, progress=PhaseProgress(on_update=_PhaseReport(report, 0.02, 0.5, words_only=True)))
    if not isinstance(loaded, pipeline.JobInput):
        raise _several_jobs(folder, loaded)
    job = loaded.job
    n = max(1, len(job.ranks))
    result = pipeline.run(
        loaded, on_rank=lambda i, r: report(0.5 + 0.5 * i / n, f"analyzing rank {r.rank} ({r.tables.events.height:,} events)")
    )
    traces = [prepare_trace(f"rank {r.rank}", r.path, result.ranks[r.rank]) for r in job.ranks]
    report(1.0, "ready")
    notes = list(job.notes) + [f"{Path(p).name}: skipped ({why})" for p, why in job.skipped]
    metadata = {"job": job.name, "world_size": job.world_size, **dict(job.metadata)}
    return Session(
        source=str(folder), kind=InputKind.CAPTURE, traces=tuple(traces), metadata=metadata, notes=tuple(notes),
        job_model=result.job_diagnosis.model,
    )


def _several_jobs(folder: Path, loaded: pipeline.Loaded) -> UsageError:
    """The error for a folder whose traces belong to several jobs (the TUI shows one job at a time)."""
    jobs = loaded.jobs if isinstance(loaded, pipeline.FolderInput) else ()
    prefix = str(folder).rstrip("/") + "/"
    listing = ", ".join(f"{j.name.removeprefix(prefix)} ({len(j.ranks)} rank{'s' if len(j.ranks) != 1 else ''})" for j in jobs[:6])
    return UsageError(
        f"the folder holds the traces of {len(jobs)} different jobs: {listing}",
        path=folder,
        hint="`tracekit analyze FOLDER` summarises every job; to browse one here, move its rank files into a folder of "
        "their own, or open the output of `tracekit batch FOLDER`",
    )


#: columns of traces.parquet the batch screen shows (others are kept out of the listing)
CATALOG_COLUMNS = (
    "path", "job", "rank", "format", "gpu", "steps", "step_ms_median", "gpu_utilization", "gpu_idle_s",
    "top_finding", "top_finding_ms", "error",
)


def read_catalog(folder: Path) -> pl.DataFrame:
    """The traces a batch output analysed (traces.parquet), worst GPU idle time first."""
    traces_file = folder / "traces.parquet"
    if not traces_file.is_file():
        raise TraceFormatError("the batch output has no traces.parquet listing its traces", path=folder)
    try:
        listing = pl.read_parquet(traces_file)
    except Exception as exc:  # polars raises several exception types for damaged files
        raise TraceCorruptError(f"traces.parquet cannot be read: {exc}", path=traces_file) from exc
    if "path" not in listing.columns:
        raise TraceFormatError("traces.parquet has no `path` column: not a tracekit batch output", path=traces_file)
    for name in CATALOG_COLUMNS:
        if name not in listing.columns:
            listing = listing.with_columns(pl.lit(None).alias(name))
    order = [c for c in ("gpu_idle_s", "path") if c in listing.columns]
    return listing.select(CATALOG_COLUMNS).sort(order, descending=[True, False][: len(order)], nulls_last=True)


def load_batch_trace(folder: Path | str, path: str, report: Progress | None = None, *, cache: bool = True) -> LoadedTrace:
    """One trace of a batch output, by the path traces.parquet records for it."""
    p = Path(path)
    if not p.is_absolute() and not p.exists():
        p = Path(folder) / p
    if not p.exists():
        raise TraceNotFoundError(
            "this trace of the batch output is not on this machine", path=p,
            hint="traces.parquet records absolute paths; open the batch output where its traces are",
        )
    return _load_file(p, p.name, report or (lambda _f, _m: None), 0.0, 1.0, cache)


def _load_batch(folder: Path, report: Progress, cache: bool) -> Session:
    """A batch output: its listing, and the first analysable trace (most GPU idle time) opened."""
    report(0.02, "reading traces.parquet")
    catalog = read_catalog(folder)
    usable = catalog.filter(pl.col("error").is_null()) if "error" in catalog.columns else catalog
    first: LoadedTrace | None = None
    notes: list[str] = []
    for path in usable["path"].to_list()[:5]:
        try:
            first = load_batch_trace(folder, str(path), lambda f, m: report(0.05 + 0.95 * f, m), cache=cache)
            break
        except TraceNotFoundError:
            notes.append(f"{path}: listed in traces.parquet but not found on this machine")
    if first is None:
        raise TraceNotFoundError(
            f"none of the {catalog.height} traces listed in traces.parquet can be opened here", path=folder / "traces.parquet",
            hint="open the batch output on the machine that holds its traces",
        )
    report(1.0, "ready")
    failed = catalog.height - usable.height
    if failed:
        notes.append(f"{failed} of the batch's {catalog.height} traces could not be analysed (see the batch screen, key 4)")
    metadata: dict[str, Any] = {"traces": catalog.height}
    return Session(
        source=str(folder), kind=InputKind.BATCH, traces=(first,), metadata=metadata, notes=tuple(notes), catalog=catalog
    )


__all__ = [
    "CATALOG_COLUMNS", "InputKind", "LoadedTrace", "Progress", "Session", "detect_input", "load_batch_trace", "load_session",
    "prepare_trace", "read_catalog",
]
