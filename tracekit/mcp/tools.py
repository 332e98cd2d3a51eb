"""The MCP server's tools as plain functions: a checked path in, a JSON-ready dict out.

Each tool takes the server's :class:`~tracekit.mcp.access.Roots` and
:class:`~tracekit.mcp.access.Limits` (through a :class:`Toolbox`) and a
:class:`~tracekit.progress.Progress`, reads through the pipeline
(:mod:`tracekit.pipeline`) and returns pieces of the JSON contract (docs/json-report.md),
never prose:

* :meth:`Toolbox.analyze`: the report document of a trace, a job or a folder of jobs;
* :meth:`Toolbox.diff`: the ``tracekit.diff/1`` document of two traces;
* :meth:`Toolbox.query`: rows of a read-only polars SQL query over the canonical tables;
* :meth:`Toolbox.list_traces`: the trace files under a folder and the jobs they form;
* :meth:`Toolbox.timeline`: one step's critical path and idle gaps, compact.

Nothing here imports the MCP SDK (:mod:`tracekit.mcp.server` adapts these to it), and nothing
here writes a file (tracekit's own parse cache aside, when :attr:`Limits.cache` is set).
Failures are :class:`~tracekit.errors.TracekitError`\\ s naming the file.
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from .. import pipeline
from ..errors import TraceFormatError, UsageError
from ..progress import Progress
from .access import Limits, Roots
from .tables import query_tables, run_query
from .timeline import step_timeline

#: results kept in memory between calls (an assistant asks several questions of one trace)
KEPT_RESULTS = 3


class Toolbox:
    """The tools over one set of roots and limits, with the last few results kept."""

    def __init__(self, roots: Roots, limits: Limits | None = None) -> None:
        self.roots = roots
        self.limits = limits or Limits()
        self._kept: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ the tools

    def analyze(self, path: str, progress: Progress | None = None) -> dict[str, Any]:
        """The JSON report of ``path`` (trace file, job folder or folder of jobs), every top-level
        key of the contract passed through; lists longer than the row cap are cut (``truncated``)."""
        from ..report import document

        result = self._result(self.roots.resolve(path), progress)
        return _capped(document(result), self.limits.max_rows)

    def diff(self, before: str, after: str, progress: Progress | None = None) -> dict[str, Any]:
        """The ``tracekit.diff/1`` document of two trace files."""
        from ..report import document

        sides = []
        for label, given in (("before", before), ("after", after)):
            real = self.roots.resolve(given)
            if real.is_dir():
                raise UsageError("diff compares two trace files, not folders", path=given, hint="give one rank's trace file")
            if progress is not None:
                progress.subject(f"{label}: {real.name}")
            side = self._result(real, progress)
            assert isinstance(side, pipeline.TraceResult)  # a file loads as one trace
            sides.append(side)
        return _capped(document(pipeline.compare(sides[0], sides[1])), self.limits.max_rows)

    def query(self, path: str, sql: str, limit: int | None = None, progress: Progress | None = None,
              collect: Callable[[pl.LazyFrame], pl.DataFrame] | None = None) -> dict[str, Any]:
        """Rows of ``sql`` (one SELECT) over the tables of ``path``; ``collect`` runs the lazy query
        (the server's runs in the background and can be cancelled)."""
        cap = self.limits.rows(limit)
        result = self._result(self.roots.resolve(path), progress)
        if isinstance(result, pipeline.FolderResult):
            raise UsageError("query reads one trace or one job; this folder holds several jobs", path=path,
                             hint="list them with list_traces and query one job's folder or one trace file")
        frame, total_known = run_query(query_tables(result), sql, cap, collect=collect)
        rows = [{k: _plain(v) for k, v in row.items()} for row in frame.head(cap).iter_rows(named=True)]
        out: dict[str, Any] = {"columns": [{"name": n, "dtype": str(t)} for n, t in frame.schema.items()], "rows": rows}
        if not total_known:
            out["truncated"] = {"rows": f"more than {cap} rows; the first {cap} are shown (add LIMIT, or aggregate)"}
        return out

    def list_traces(self, folder: str, limit: int | None = None) -> dict[str, Any]:
        """Trace files under ``folder`` (recursively) with their formats, and the jobs they form."""
        from .listing import list_folder

        real = self.roots.resolve(folder, folder_files=False)
        if not real.is_dir():
            raise UsageError("not a folder", path=folder, hint="list_traces takes a folder; analyze takes a trace file")
        return list_folder(real, self.roots, self.limits.rows(limit))

    def timeline(self, path: str, step: int | None = None, rank: int | None = None, limit: int | None = None,
                 progress: Progress | None = None) -> dict[str, Any]:
        """One step's critical path and idle gaps (the representative step when ``step`` is None)."""
        result = self._result(self.roots.resolve(path), progress)
        trace = _one_trace(result, rank, path)
        return step_timeline(trace, step, self.limits.rows(limit))

    # ------------------------------------------------------------------ results, kept

    def _result(self, real: Path, progress: Progress | None) -> pipeline.Result:
        key = (str(real), _identity(real), self.limits.cache)
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return self._kept[key]  # type: ignore[no-any-return]
        result = pipeline.run(pipeline.load(real, cache=self.limits.cache, progress=progress), progress=progress)
        with self._lock:
            self._kept[key] = result
            while len(self._kept) > KEPT_RESULTS:
                self._kept.popitem(last=False)
        return result


def _identity(real: Path) -> tuple[Any, ...]:
    """What changes when the file (or a file of the folder) changes: kept results are then stale."""
    def stamp(p: Path) -> tuple[str, int, int]:
        st = p.stat()
        return (p.name, st.st_mtime_ns, st.st_size)

    if real.is_dir():
        return tuple(sorted(stamp(p) for p in real.iterdir() if p.is_file()))
    return stamp(real)


def _one_trace(result: pipeline.Result, rank: int | None, path: str) -> pipeline.TraceResult:
    """The trace result a per-step tool reads: the file's, or one rank of a job (the lowest by default)."""
    if isinstance(result, pipeline.TraceResult):
        return result
    if isinstance(result, pipeline.FolderResult):
        raise UsageError("this folder holds several jobs; timeline reads one", path=path,
                         hint="list them with list_traces and pass one job's folder or one trace file")
    ranks = result.ranks
    if not ranks:
        raise TraceFormatError("the job has no diagnosed rank", path=path)
    pick = min(ranks) if rank is None else rank
    if pick not in ranks:
        raise UsageError(f"the job has no rank {pick}", path=path, hint=f"ranks: {', '.join(map(str, sorted(ranks)))}")
    return ranks[pick]


def _plain(value: Any) -> Any:
    """A value JSON can carry: non-finite floats become null, other non-JSON scalars their text."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def _capped(doc: dict[str, Any], cap: int) -> dict[str, Any]:
    """``doc`` with every list longer than ``cap`` cut to ``cap`` items; ``truncated`` (added only
    when something was cut) maps each cut list's path (``steps``, ``ranks[0].steps``) to its length."""
    cut: dict[str, int] = {}

    def walk(value: Any, where: str) -> Any:
        if isinstance(value, dict):
            return {k: walk(v, f"{where}.{k}" if where else k) for k, v in value.items()}
        if isinstance(value, list):
            if len(value) > cap:
                cut[where] = len(value)
                value = value[:cap]
            return [walk(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return _plain(value)

    out: dict[str, Any] = walk(doc, "")
    if cut:
        out["truncated"] = cut
    return out


def describe_paths(roots: Roots) -> str:
    """How the tools take paths, for the server's instructions."""
    return (
        f"Paths are files or folders under {roots.describe()} (a relative path is taken from "
        f"{roots.folders[0]}{os.sep}); anything else is refused."
    )


__all__ = ["KEPT_RESULTS", "Toolbox", "describe_paths"]
