"""The overview: what the job is, where the step time goes, and the ranked findings."""

from __future__ import annotations

from typing import ClassVar

import polars as pl
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Label, Static

from ...analysis import Diagnosis
from ...report.formatting import plan_lines
from ..bindings import OVERVIEW, bindings
from ..model import breakdown_rows, findings_frame, first_occurrence, utilization_per_step
from ..session import InputKind
from ..widgets.charts import BreakdownChart, StepBars
from ..widgets.frame_table import Column, FrameTable, ms, pct
from .base import SessionScreen

FINDING_COLUMNS = (
    Column("index", "#", 2, lambda v: str(v + 1), "right"),
    Column("title", "finding", 44),
    Column("ms_per_step", "ms/step", 8, ms, "right"),
    Column("share", "share", 6, pct, "right"),
    Column("predicted_ms", "if fixed", 9, lambda v: "—" if v is None else f"{v:,.1f} ms", "right"),
    Column("steps", "steps", 5, str, "right"),
    Column("worst", "worst steps", 12),
)


def summary_text(tk_source: str, kind: InputKind, d: Diagnosis, where: str) -> Text:
    """The header lines: input, format, job, devices, steps, step time, utilization."""
    info = d.info
    text = Text()
    text.append("tracekit", "bold")
    text.append(f" · {tk_source}")
    if kind is not InputKind.TRACE:
        text.append(f" ({kind.value})")
    text.append("\n")
    parts = [info.format + (f" {info.format_version}" if info.format_version else "")]
    if info.world_size:
        parts.append(f"world size {info.world_size}" + (f" ({info.backend})" if info.backend else ""))
    if d.devices.height and "name" in d.devices.columns:
        names = sorted({str(n) for n in d.devices["name"].drop_nulls().to_list() if n})
        if names:
            parts.append(", ".join(names))
    if where:
        parts.append(where)
    text.append(" · ".join(parts) + "\n")
    sources = ", ".join(sorted(set(d.step_sources.values()))) or "none"
    median = "n/a" if d.step_ms_median is None else f"{d.step_ms_median:,.2f} ms"
    util = "n/a" if d.gpu_utilization is None else f"{100 * d.gpu_utilization:.1f}%"
    text.append(f"{d.complete_steps} steps (from {sources}) · step time {median} (median) · GPU utilization ")
    text.append(util, "bold")
    text.append("\n" + d.efficiency.headline)
    return text


class OverviewScreen(SessionScreen):
    """Job and device summary, step-time breakdown, utilization per step, ranked findings."""

    SPECS = OVERVIEW
    BINDINGS: ClassVar[list[BindingType]] = bindings(OVERVIEW)  # type: ignore[assignment]

    def compose(self) -> ComposeResult:
        yield Static(id="summary")
        yield Static(id="plan", markup=False)
        with Horizontal(id="charts"):
            yield BreakdownChart(id="breakdown")
            yield StepBars(id="utilization")
        yield Label("Findings (largest cost first) · Enter: detail · t: timeline", id="findings-title")
        yield FrameTable(findings_frame_empty(), FINDING_COLUMNS, id="findings", empty_text="no findings: nothing costs 5% of the step")
        yield Vertical(Static(id="notes", markup=False), id="notes-box")
        yield Footer()

    def on_mount(self) -> None:
        self.selection_changed()
        self.query_one("#findings", FrameTable).focus()

    def selection_changed(self) -> None:
        tk = self.tk
        d = tk.trace.diagnosis
        self.query_one("#summary", Static).update(summary_text(tk.session.source, tk.session.kind, d, tk.where()))
        self.query_one("#plan", Static).update(plan_text(d))
        self.query_one("#breakdown", BreakdownChart).set_rows(breakdown_rows(d))
        util = utilization_per_step(d, tk.rank)
        self.query_one("#utilization", StepBars).set_data(
            util["step"].to_list(), util["utilization"].to_list(), util["complete"].to_list()
        )
        self.query_one("#findings", FrameTable).set_frame(findings_frame(d))
        notes = list(tk.session.notes) + list(d.data_quality) + list(d.info.warnings)
        box = self.query_one("#notes-box")
        box.display = bool(notes)
        self.query_one("#notes", Static).update("\n".join(f"• {n}" for n in notes))

    def _current_index(self) -> int | None:
        row = self.query_one("#findings", FrameTable).current_row()
        return None if row is None else int(row["index"])

    def action_open_finding(self) -> None:
        index = self._current_index()
        if index is not None:
            from .finding import FindingScreen

            self.app.push_screen(FindingScreen(index))

    def action_finding_timeline(self) -> None:
        index = self._current_index()
        if index is None:
            return
        tk = self.tk
        focus = first_occurrence(tk.current[0], tk.trace, tk.trace.diagnosis.findings[index])
        tk.show_focus(focus)

    def on_frame_table_row_chosen(self, event: FrameTable.RowChosen) -> None:
        event.stop()
        self.action_open_finding()


def plan_text(d: Diagnosis) -> Text:
    """The answer first (the report's opening sentence), then the fix plan's steps."""
    text = Text()
    sentence = d.plan.sentence()
    if sentence:
        text.append(sentence, "bold")
    lines = plan_lines(d.plan)
    if lines:
        text.append("\nFix plan (each step with the earlier ones applied)\n" + "\n".join(lines))
    return text


def findings_frame_empty() -> pl.DataFrame:
    return pl.DataFrame(schema={c.key: pl.String for c in FINDING_COLUMNS})


__all__ = ["OverviewScreen", "plan_text", "summary_text"]
