"""The ``query`` tool's tables and its read-only SQL.

The tables a query sees (docs/schema.md and docs/mcp.md give the columns):

* the canonical tables of the trace: ``events``, ``links``, ``flows``, ``devices``, ``threads``,
  ``counters``, ``memory``;
* ``kernels``: the ``events`` rows of kind ``kernel``;
* what the diagnosis derived: ``steps`` (one row per step window), ``gaps`` (idle gaps with
  their cause), ``syncs`` (host-device sync points), ``critical_path`` (the critical path's
  segments of every step).

For a job (a folder of one job's traces) each table is every rank's rows together (their
``rank`` column tells them apart).

**Read-only.**  A query is one ``SELECT`` (or ``WITH ... SELECT``) statement run by polars
over these frames only: nothing registered from the caller's globals, and the SQL table
functions that read files (``read_csv``, ``read_parquet``, ...) are refused before polars
sees the text, and again if a file scan appears in the plan.  Results are capped: the query
is collected with one row more than the cap, so a truncated answer says so.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import polars as pl

from .. import pipeline
from ..errors import UsageError

#: canonical tables of :class:`tracekit.schema.TraceTables` a query sees
CANONICAL = ("events", "links", "flows", "devices", "threads", "counters", "memory")
#: every table name a query may use, in the order the tool's description lists them
TABLES = (*CANONICAL, "kernels", "steps", "gaps", "syncs", "critical_path")

# comments, then the statement's first word
_COMMENT = re.compile(r"--[^\n]*|/\*.*?\*/", re.S)
_FIRST_WORD = re.compile(r"\s*([A-Za-z]+)")
# a file-reading table function, wherever it stands (inside quotes too: refusing a string that
# merely names one costs little, missing a quoted call would read a file)
_FILE_FUNCTION = re.compile(r"(?i)(?<![a-z0-9_])(read|scan)_[a-z0-9_]*")
# how polars prints a scan of a file in a plan (an in-memory frame prints as "DF [...]")
_PLAN_SCAN = re.compile(r"\bSCAN\b")


def query_tables(result: pipeline.TraceResult | pipeline.JobResult) -> dict[str, pl.LazyFrame]:
    """The tables a query over ``result`` sees (see the module docstring)."""
    traces = [result] if isinstance(result, pipeline.TraceResult) else [result.ranks[r] for r in sorted(result.ranks)]
    parts: dict[str, list[pl.DataFrame]] = {name: [] for name in TABLES}
    for trace in traces:
        tables, d = trace.tables, trace.diagnosis
        for name in CANONICAL:
            parts[name].append(getattr(tables, name))
        parts["kernels"].append(tables.events.filter(pl.col("kind") == "kernel"))
        parts["steps"].append(d.steps)
        parts["gaps"].append(d.timeline.gaps)
        parts["syncs"].append(d.syncs)
        cp = d.critical_path
        if cp is not None:
            parts["critical_path"].append(cp.segments)
    return {name: _together(frames).lazy() for name, frames in parts.items() if frames}


def _together(frames: list[pl.DataFrame]) -> pl.DataFrame:
    if len(frames) == 1:
        return frames[0]
    # the ranks' categorical and enum columns agree in dtype; relaxed: one rank's all-null column
    return pl.concat(frames, how="diagonal_relaxed")


def check_sql(sql: str) -> str:
    """``sql`` when it is one read-only SELECT that reads no file; UsageError otherwise."""
    text = sql.strip().rstrip(";").strip()
    if not text:
        raise UsageError("empty query", hint=f"SELECT ... FROM one of: {', '.join(TABLES)}")
    bare = _COMMENT.sub(" ", text)
    first = _FIRST_WORD.match(bare)
    if first is None or first.group(1).upper() not in ("SELECT", "WITH"):
        raise UsageError("a query is one SELECT statement (or WITH ... SELECT); nothing else runs",
                         hint=f"tables: {', '.join(TABLES)}")
    found = _FILE_FUNCTION.search(text)
    if found:
        raise UsageError(f"{found.group(0)}: queries read the trace's tables only, never files",
                         hint=f"tables: {', '.join(TABLES)}")
    return text


def run_query(
    tables: Mapping[str, pl.LazyFrame], sql: str, cap: int, *, collect: Callable[[pl.LazyFrame], pl.DataFrame] | None = None
) -> tuple[pl.DataFrame, bool]:
    """At most ``cap + 1`` rows of ``sql`` over ``tables``, and whether they are all its rows."""
    text = check_sql(sql)
    ctx = pl.SQLContext(frames=dict(tables), register_globals=False)
    try:
        lazy = ctx.execute(text, eager=False)
        plan = lazy.explain(optimized=False)
    except (pl.exceptions.PolarsError, ValueError, TypeError) as exc:
        raise UsageError(f"the query failed: {_first_line(exc)}", hint=f"tables: {', '.join(TABLES)}") from None
    if _PLAN_SCAN.search(plan):
        raise UsageError("queries read the trace's tables only, never files", hint=f"tables: {', '.join(TABLES)}")
    limited = lazy.head(cap + 1)
    try:
        frame = collect(limited) if collect is not None else limited.collect()
    except (pl.exceptions.PolarsError, ValueError, TypeError) as exc:
        raise UsageError(f"the query failed: {_first_line(exc)}") from None
    return frame, frame.height <= cap


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


__all__ = ["CANONICAL", "TABLES", "check_sql", "query_tables", "run_query"]
