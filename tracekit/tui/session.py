"""What the TUI holds once its input is loaded: a :class:`Session` of :class:`LoadedTrace`\\ s.

The loader (:mod:`tracekit.tui.loader`) fills these in; the display frames
(:mod:`tracekit.tui.model`) and the screens only read them.  They live in a module of their own,
below both, so that neither imports the other for them.  Nothing here imports Textual.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

import polars as pl

from ..analysis.results import Diagnosis
from ..pipeline import TraceResult
from ..schema import TraceTables


class InputKind(str, Enum):
    """The kinds of path ``tracekit tui`` opens."""

    TRACE = "trace"
    CAPTURE = "capture"
    BATCH = "batch"


@dataclass(frozen=True)
class LoadedTrace:
    """One trace, read and diagnosed (:class:`tracekit.pipeline.TraceResult`), with the frames
    its tables screen shows."""

    #: short name for selectors ("rank 1", or the file name)
    name: str
    path: str
    result: TraceResult
    #: the tables screen's frames by name (:func:`tracekit.tui.model.display_frames`), computed
    #: once by the loading worker so that no screen builds them while drawing
    frames: Mapping[str, pl.DataFrame] = field(compare=False, repr=False)

    @property
    def tables(self) -> TraceTables:
        return self.result.tables

    @property
    def diagnosis(self) -> Diagnosis:
        return self.result.diagnosis

    def frame(self, name: str) -> pl.DataFrame:
        """A display frame by name (gaps, syncs, kernels, steps, efficiency)."""
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
    #: a batch output's traces.parquet (see :func:`tracekit.tui.loader.read_catalog`); None for other inputs
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


__all__ = ["InputKind", "LoadedTrace", "Session"]
