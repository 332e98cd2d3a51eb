"""A job of ranks as one system: one lane per rank for a representative step (capture folders)."""

from __future__ import annotations

from typing import Any

import polars as pl
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Footer, Label, Static

from ...report.formatting import ONE_STEP_BASIS
from .base import SessionScreen

#: characters of the lanes: work between collectives, work on the cross-rank critical path,
#: waiting inside a collective for the last rank, the collective itself
WORK, CRITICAL, WAIT, COMM = "─", "━", "░", "█"


def rank_lanes_text(lanes: pl.DataFrame, step: int, width: int) -> Text:
    """The rank lanes of ``step`` (see :func:`tracekit.report.svg.rank_lanes_svg`) as text,
    ``width`` cells for the time axis."""
    rows = lanes.filter(pl.col("step") == step).sort("j", "rank")
    out = Text()
    if rows.height == 0:
        return out
    t0 = int(rows["work_start_ns"].fill_null(rows["start_ns"]).min())  # type: ignore[arg-type]
    t1 = int(rows["end_ns"].max())  # type: ignore[arg-type]
    span = max(t1 - t0, 1)
    width = max(width, 10)

    def cell(t: int) -> int:
        return min(width - 1, max(0, int((t - t0) / span * width)))

    last = rows.group_by("j").agg(pl.col("start_ns").max().alias("_last"))
    rows = rows.join(last, on="j")
    for rank in sorted(int(r) for r in rows["rank"].unique().to_list()):
        line = [(" ", "")] * width
        for row in rows.filter(pl.col("rank") == rank).iter_rows(named=True):
            if row["work_start_ns"] is not None:
                mark, style = (CRITICAL, "bold magenta") if row["critical"] else (WORK, "dim")
                for i in range(cell(row["work_start_ns"]), cell(row["start_ns"])):
                    line[i] = (mark, style)
            wait_end = min(max(int(row["_last"]), int(row["start_ns"])), int(row["end_ns"]))
            for i in range(cell(row["start_ns"]), cell(wait_end)):
                line[i] = (WAIT, "cyan")
            for i in range(cell(wait_end), cell(row["end_ns"]) + 1):
                line[i] = (COMM, "blue")
        out.append(f"rank {rank:<4} ", style="bold")
        for ch, style in line:
            out.append(ch, style=style or None)
        out.append("\n")
    out.append(f"{'':10}0 ms{'':{max(width - 12, 1)}}{span / 1e6:,.2f} ms\n", style="dim")
    out.append(f"{WORK} work between collectives  ", style="dim")
    out.append(f"{CRITICAL} cross-rank critical path  ", style="bold magenta")
    out.append(f"{WAIT} waiting for the last rank  ", style="cyan")
    out.append(f"{COMM} collective", style="blue")
    return out


def job_summary(model: Any) -> Text:
    """The job model's answers in a few lines: path, waits, clocks, how collectives matched."""
    out = Text()
    if model.step_ms is not None:
        basis = ONE_STEP_BASIS if model.one_step else "median between the last collectives of consecutive steps"
        out.append(f"job step {model.step_ms:,.2f} ms ({basis})\n")
    for r in model.path.filter(pl.col("ms_per_step") >= 0.01).head(4).iter_rows(named=True):
        who = "collectives" if r["rank"] is None else f"rank {r['rank']}"
        out.append(f"  path: {who} · {r['cause']} {r['ms_per_step']:,.2f} ms per step ({100 * (r['share'] or 0):.0f}%)\n")
    for r in model.waits.iter_rows(named=True):
        if r["wait_ms_per_step"]:
            whom = "" if r["waits_for"] is None else f" (mostly for rank {r['waits_for']})"
            out.append(f"  rank {r['rank']} waits {r['wait_ms_per_step']:,.2f} ms per step in collectives{whom}\n")
    if model.matching:
        out.append(f"collectives matched by {model.matching}\n", style="dim")
    return out


class JobScreen(SessionScreen):
    """The ranks of a job side by side, joined at their collectives."""

    def compose(self) -> ComposeResult:
        from ...analysis.job_replay import lanes_step

        model = self.tk.session.job_model
        lanes = None if model is None else model.lanes
        step = None if lanes is None else lanes_step(lanes)
        with VerticalScroll(id="job-box"):
            if model is None or lanes is None or step is None:
                yield Label("Job · no rank lanes: the ranks share no matched collective over a full step", id="job-title")
            else:
                yield Label(f"Job · {len(model.ranks)} ranks · rank lanes of step {step} (aligned clocks)", id="job-title")
                yield Static(rank_lanes_text(lanes, step, max(self.app.size.width - 14, 20)), id="job-lanes")
                yield Static(job_summary(model), id="job-summary")
        yield Footer()


__all__ = ["JobScreen", "job_summary", "rank_lanes_text"]
