"""What ``tracekit tui PATH`` opens: one loader that dispatches on the kind of input.

:func:`load_session` turns a path into a :class:`Session` — one or more traces, each with
its canonical tables and :class:`~tracekit.analysis.Diagnosis` — and reports progress through a
callback, so the app can run it in a worker and draw a progress bar.  Nothing here imports
Textual: the loader is plain Python on top of the headless core, and every failure is a
:class:`~tracekit.errors.TracekitError` naming the path and the problem.

Inputs (see :func:`detect_input`):

* a trace file (Kineto ``.json``/``.json.gz``, Nsight ``.sqlite``/``.nsys-rep``);
* a capture folder (``metadata.json`` beside ``rank{R}.*.pt.trace.json[.gz]`` files), or
  any folder of one job's traces, read with :func:`tracekit.reading.job.read_job` (one trace per rank);
* a batch output folder (``traces.parquet``, ``findings.parquet``, ``jobs.parquet``): its
  listing of traces (:attr:`Session.catalog`), with the trace that wasted the most GPU time
  opened first; others open on demand (:func:`load_batch_trace`) from the paths it records.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

import polars as pl

from ..analysis.diagnose import diagnose, diagnose_job
from ..analysis.results import Diagnosis
from ..errors import TraceCorruptError, TraceFormatError, TraceNotFoundError
from ..progress import Progress as PhaseProgress
from ..progress import ProgressState, describe
from ..reading.job import is_trace_name
from ..schema import TraceTables

#: progress callback: fraction done in [0, 1] and what is happening, in words
Progress = Callable[[float, str], None]

BATCH_FILES = ("traces.parquet", "findings.parquet", "jobs.parquet")


class InputKind(str, Enum):
    """The kinds of path ``tracekit tui`` opens."""

    TRACE = "trace"
    CAPTURE = "capture"
    BATCH = "batch"


@dataclass(frozen=True)
class LoadedTrace:
    """One trace file, read and diagnosed."""

    #: short name for selectors ("rank 1", or the file name)
    name: str
    path: str
    tables: TraceTables
    diagnosis: Diagnosis
    #: the tables screen's frames (gaps, syncs, kernels, steps), computed by the loading worker
    frames: dict[str, pl.DataFrame] = field(default_factory=dict, compare=False, repr=False)

    def frame(self, name: str) -> pl.DataFrame:
        """A display frame by name (see :func:`tracekit.tui.model.display_frames`), computed once."""
        if name not in self.frames:
            from .model import display_frames

            self.frames.update(display_frames(self.diagnosis))
        return self.frames[name]

    @property
    def ranks(self) -> tuple[int, ...]:
        steps = self.diagnosis.steps
        if steps.height:
            return tuple(sorted(int(r) for r in steps["rank"].unique()))
        return tuple(self.tables.info.ranks) or (0,)


@dataclass(frozen=True)
class Session:
    """Everything the TUI shows: the traces behind one input path."""

    source: str
    kind: InputKind
    traces: tuple[LoadedTrace, ...]
    #: job-level description (capture metadata.json, batch job row), for the overview
    metadata: Mapping[str, Any] = field(default_factory=dict)
    #: things the user should know about the input as a whole (skipped files...)
    notes: tuple[str, ...] = ()
    #: a batch output's traces.parquet (see :func:`read_catalog`); None for other inputs
    catalog: pl.DataFrame | None = None
    #: the job model of a folder of ranks (:class:`tracekit.analysis.job_model.JobModel`)
    job_model: Any = None

    def with_trace(self, trace: LoadedTrace) -> tuple[Session, int]:
        """This session with ``trace`` added (or found, when already loaded) and its index."""
        for i, t in enumerate(self.traces):
            if t.path == trace.path:
                return self, i
        return replace(self, traces=(*self.traces, trace)), len(self.traces)

    def choices(self) -> list[tuple[int, int]]:
        """Every (trace index, rank) the rank selector cycles through, in order."""
        return [(i, r) for i, t in enumerate(self.traces) for r in t.ranks]


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
    "replay": (0.9, 0.95),
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
    from ..reading.trace import read_trace

    span = hi - lo
    report(lo, f"reading {path.name}")
    progress = PhaseProgress(on_update=_PhaseReport(report, lo, hi))
    progress.subject(path.name)
    tables = read_trace(path, cache=cache, progress=progress)
    diagnosis = diagnose(tables, progress=progress)
    report(lo + 0.95 * span, f"preparing the tables of {path.name}")
    trace = prepare_trace(name, str(path), tables, diagnosis)
    report(hi, f"analysed {path.name}")
    return trace


def prepare_trace(name: str, path: str, tables: TraceTables, diagnosis: Diagnosis) -> LoadedTrace:
    """A loaded trace with its display frames computed now (in the loading worker), not on first view."""
    from .model import display_frames

    return LoadedTrace(name=name, path=path, tables=tables, diagnosis=diagnosis, frames=display_frames(diagnosis))


def _load_capture(folder: Path, report: Progress, cache: bool) -> Session:
    """A capture folder (or any folder of one job's traces), through :func:`tracekit.reading.job.read_job`."""
    from ..reading.job import read_job

    report(0.02, f"reading the traces in {folder.name}")
    job = read_job(folder, cache=cache, progress=PhaseProgress(on_update=_PhaseReport(report, 0.02, 0.5, words_only=True)))
    n = max(1, len(job.ranks))
    jd = diagnose_job(
        job, on_rank=lambda i, r: report(0.5 + 0.5 * i / n, f"analyzing rank {r.rank} ({r.tables.events.height:,} events)")
    )
    traces = [prepare_trace(f"rank {r.rank}", r.path, r.tables, jd.diagnoses[r.rank]) for r in job.ranks]
    report(1.0, "ready")
    notes = list(job.notes) + [f"{Path(p).name}: skipped ({why})" for p, why in job.skipped]
    metadata = {"job": job.name, "world_size": job.world_size, **dict(job.metadata)}
    return Session(
        source=str(folder), kind=InputKind.CAPTURE, traces=tuple(traces), metadata=metadata, notes=tuple(notes),
        job_model=jd.model,
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
