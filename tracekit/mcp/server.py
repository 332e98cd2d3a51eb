"""The MCP server over stdio: the tools of :mod:`tracekit.mcp.tools` served with the ``mcp`` SDK.

This is the only module of tracekit that imports the SDK; ``tracekit mcp`` imports it when
the command runs (:func:`tracekit.mcp.load_server` names the extra to install when it is
missing).  Each tool call:

* runs in a worker thread, one call at a time (a parse holds a trace's tables in memory; a
  second call waits for the first);
* sends ``notifications/progress`` while it works, when the client asked for them (a progress
  token): the phase of the parse or the analysis in words, as ``tracekit analyze`` shows it;
* is answered with an error once it runs past the per-call time limit.  The work stops at its
  next progress report (a parse reports many times a second; a query is cancelled in polars);
* answers a :class:`~tracekit.errors.TracekitError` (a refused path, a file that is not a
  trace) as an error result whose text is the one-paragraph message the command line prints.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
import polars as pl
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from .._version import __version__
from ..errors import TracekitError
from ..progress import Progress, ProgressState, describe
from .tables import TABLES
from .tools import Toolbox, describe_paths

#: seconds between progress notifications at most
PROGRESS_INTERVAL_S = 0.5

_READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


class _Abandoned(Exception):
    """Raised inside the worker thread once its call has been answered as too slow."""


class _Call:
    """One tool call's worker: its progress, its cancellation, its deadline."""

    def __init__(self, name: str, seconds: float) -> None:
        self.name, self.seconds = name, seconds
        self.cancelled = threading.Event()
        self.state: ProgressState | None = None
        self._worker: int | None = None
        self.progress = Progress(on_update=self._update)

    def _update(self, state: ProgressState) -> None:
        self.state = state
        if self.cancelled.is_set() and threading.get_ident() == self._worker:
            raise _Abandoned(self.name)

    def work(self, fn: Callable[[_Call], dict[str, Any]]) -> dict[str, Any]:
        self._worker = threading.get_ident()
        return fn(self)

    def collect(self, lazy: pl.LazyFrame) -> pl.DataFrame:
        """``lazy`` collected in polars' background, cancelled when the call is abandoned."""
        query = lazy.collect(background=True)
        while True:
            frame = query.fetch()
            if frame is not None:
                return frame
            if self.cancelled.wait(0.02):
                query.cancel()
                raise _Abandoned(self.name)


class TracekitServer:
    """The MCP server of one :class:`Toolbox` (``tracekit mcp``)."""

    def __init__(self, toolbox: Toolbox) -> None:
        self.toolbox = toolbox
        limits = toolbox.limits
        self._limiter: anyio.CapacityLimiter | None = None
        self.mcp: MCPServer[Any] = MCPServer(
            name="tracekit",
            title="tracekit: why is my GPU idle?",
            version=__version__,
            instructions=(
                "tracekit reads PyTorch profiler (Kineto) traces and Nsight Systems exports and tells why the GPU is idle: "
                "the step time's breakdown by cause, findings ranked by what fixing them saves, the critical path. "
                "Start with list_traces on a folder, then analyze a trace or a job folder; query and timeline answer "
                f"follow-up questions. {describe_paths(toolbox.roots)} Each call may run {limits.max_seconds:g} s and "
                f"returns at most {limits.max_rows} rows per list. Nothing is written (tracekit's parse cache aside)."
            ),
            log_level="WARNING",
        )
        self._register()

    def run(self) -> None:
        """Serve over stdin/stdout until the client closes them."""
        anyio.run(self.mcp.run_stdio_async)

    # ------------------------------------------------------------------ calls

    async def _call(self, ctx: Context, name: str, fn: Callable[[_Call], dict[str, Any]]) -> dict[str, Any]:
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(1)
        call = _Call(name, self.toolbox.limits.max_seconds)
        outcome: dict[str, Any] = {}
        done = anyio.Event()

        async def worker() -> None:
            try:
                outcome["value"] = await anyio.to_thread.run_sync(call.work, fn, abandon_on_cancel=True, limiter=self._limiter)
            except Exception as exc:  # re-raised below, outside the task group (no exception group)
                outcome["error"] = exc
            done.set()

        with anyio.move_on_after(call.seconds) as scope:
            async with anyio.create_task_group() as group:
                group.start_soon(worker)
                await self._report(ctx, call, done)
        if scope.cancelled_caught:
            call.cancelled.set()
            raise ToolError(
                f"tracekit: too slow: {name} ran past the per-call limit of {call.seconds:g} s and was stopped"
                + (f" (at: {describe(call.state)})" if call.state is not None else "")
                + "\n  hint: a first parse of a large trace takes longest (later calls reuse the cache); "
                "start the server with a larger `tracekit mcp --max-seconds`"
            )
        error = outcome.get("error")
        if isinstance(error, TracekitError):
            raise ToolError(error.render()) from None
        if error is not None:
            raise error
        return outcome["value"]  # type: ignore[no-any-return]

    @staticmethod
    async def _report(ctx: Context, call: _Call, done: anyio.Event) -> None:
        """Progress notifications until the worker has its answer."""
        told: str | None = None
        while not done.is_set():
            with anyio.move_on_after(PROGRESS_INTERVAL_S):
                await done.wait()
            state = call.state
            if state is None or done.is_set():
                continue
            words = describe(state)
            if words != told:
                told = words
                await ctx.report_progress(round(state.elapsed_s, 1), None, words)

    # ------------------------------------------------------------------ the tools

    def _register(self) -> None:
        box, mcp = self.toolbox, self.mcp
        rows = box.limits.max_rows

        @mcp.tool(name="analyze", annotations=_READ_ONLY, description=(
            "Diagnose a trace file, a folder of one job's traces (one trace per rank, or a `tracekit capture` folder) or a "
            "folder of several jobs. Returns the JSON report (schema tracekit.report/1; tracekit.jobs/1 for several jobs): "
            "`answer` (the diagnosis in one sentence), `plan` (the fixes to make in order, each with the step time after it and "
            "every earlier fix, its saving and the fixes that would do instead), "
            "`summary` (step time, GPU utilization, breakdown of the step by cause), `findings` ranked by what fixing "
            "them saves per step, each with evidence, the fix and the predicted step time, `critical_path`, `kernels`, "
            "`sync_points` (with the Python line when the trace has stacks), `efficiency`, `memory`, `steps`, and for "
            f"a job `job` and `ranks`. Lists longer than {rows} items are cut; `truncated` then gives their lengths."
        ))
        async def analyze(path: str, ctx: Context) -> dict[str, Any]:
            return await self._call(ctx, "analyze", lambda c: box.analyze(path, c.progress))

        @mcp.tool(name="diff", annotations=_READ_ONLY, description=(
            "Compare two trace files of the same training loop, before and after a change. Returns the tracekit.diff/1 "
            "document: `verdict` (faster, slower, within_noise, not_comparable) with `verdict_reasons`, `noise_pct` "
            "(the noise floor of both traces' step times), `step_ms` before/after/delta, each cause's ms per step, the "
            "findings fixed, new, better or worse, the top kernels, and `plan_check` (which step of BEFORE's fix plan the "
            "change made, its predicted step time against AFTER's measured one)."
        ))
        async def diff(before: str, after: str, ctx: Context) -> dict[str, Any]:
            return await self._call(ctx, "diff", lambda c: box.diff(before, after, c.progress))

        @mcp.tool(name="query", annotations=_READ_ONLY, description=(
            "Run one read-only SQL SELECT (polars SQL) over the tables of a trace file or a job folder: "
            f"{', '.join(TABLES)} (columns: docs/schema.md; times in ns). Returns `columns` and `rows` "
            f"(at most `limit`, never more than {rows}); `truncated` says when there were more. Example: "
            "SELECT name, count(*) AS n, sum(dur_ns)/1e6 AS ms FROM kernels GROUP BY name ORDER BY ms DESC LIMIT 10"
        ))
        async def query(path: str, sql: str, ctx: Context, limit: int | None = None) -> dict[str, Any]:
            return await self._call(ctx, "query", lambda c: box.query(path, sql, limit, c.progress, collect=c.collect))

        @mcp.tool(name="list_traces", annotations=_READ_ONLY, description=(
            "List the trace files under a folder (recursively) with their formats (kineto, nsys, nsys-rep) and sizes, "
            "and the jobs they form (capture folders and rank files grouped by name). Reads only the files' first bytes."
        ))
        async def list_traces(ctx: Context, folder: str = ".", limit: int | None = None) -> dict[str, Any]:
            return await self._call(ctx, "list_traces", lambda c: box.list_traces(folder, limit))

        @mcp.tool(name="timeline", annotations=_READ_ONLY, description=(
            "One step of a trace, compact: its duration and GPU utilization, the critical path as runs of one cause on "
            "one track (ms from the step's start, with the longest event's name) and the GPU's idle gaps with the cause "
            "each is charged to. `step` defaults to the representative step (closest to the median); `rank` picks a "
            "rank of a job folder (the lowest by default)."
        ))
        async def timeline(
            path: str, ctx: Context, step: int | None = None, rank: int | None = None, limit: int | None = None
        ) -> dict[str, Any]:
            return await self._call(ctx, "timeline", lambda c: box.timeline(path, step, rank, limit, c.progress))


__all__ = ["PROGRESS_INTERVAL_S", "TracekitServer"]
