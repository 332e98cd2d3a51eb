"""One finding in full: cost, evidence, the steps and gaps involved, and the fix."""

from __future__ import annotations

from typing import Any, ClassVar

import polars as pl
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import VerticalScroll
from textual.widgets import Footer, Label, Static

from ...analysis.causes import FINDING_BY_NAME, finding_cause
from ...analysis.findings import Finding
from ...report.formatting import finding_cost, location_text
from ..bindings import FINDING, bindings
from ..model import Focus, first_occurrence
from ..widgets.frame_table import Column, FrameTable, ms
from .base import SessionScreen

GAP_COLUMNS = (
    Column("rank", "rank", 4, str, "right"),
    Column("step", "step", 5, str, "right"),
    Column("device", "gpu", 3, str, "right"),
    Column("at_ms", "at (ms)", 9, ms, "right"),
    Column("dur_ms", "idle (ms)", 9, ms, "right"),
    Column("cause", "cause", 18),
    Column("part_ms", "this cause (ms)", 15, ms, "right"),
)


def evidence_lines(value: Any, indent: str = "") -> list[str]:
    """Evidence (nested dicts and lists of JSON values) as indented text lines."""
    lines: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines.append(f"{indent}{key}:")
                lines.extend(evidence_lines(item, indent + "  "))
            else:
                lines.append(f"{indent}{key}: {_scalar(item)}")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict):
                lines.append(indent + "• " + ", ".join(f"{k}={_scalar(v)}" for k, v in item.items()))
            else:
                lines.append(f"{indent}• {_scalar(item)}")
    else:
        lines.append(indent + _scalar(value))
    return lines


def _scalar(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    if isinstance(value, list):
        return "[]"
    if isinstance(value, dict):
        return "{}"
    return str(value)


def involved_gaps(gaps: pl.DataFrame, raw_gaps: pl.DataFrame, finding: Finding) -> pl.DataFrame:
    """The gaps holding time of the finding's cause, largest share first."""
    column = f"{finding_cause(finding.kind)}_ns"
    if column not in raw_gaps.columns or gaps.height == 0:
        return gaps.with_columns(pl.lit(None, pl.Float64).alias("part_ms")).clear()
    part = raw_gaps.select(pl.col("gap_id").cast(pl.Int64), (pl.col(column) / 1e6).alias("part_ms"))
    return gaps.join(part, on="gap_id").filter(pl.col("part_ms") > 0).sort(["part_ms", "start_ns"], descending=[True, False])


class FindingScreen(SessionScreen):
    """The detail of finding number ``index`` of the current trace."""

    SPECS = FINDING
    BINDINGS: ClassVar[list[BindingType]] = bindings(FINDING)  # type: ignore[assignment]

    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index

    @property
    def finding(self) -> Finding:
        return self.tk.trace.diagnosis.findings[self.index]

    def compose(self) -> ComposeResult:
        f = self.finding
        d = self.tk.trace.diagnosis
        with VerticalScroll(id="finding-body"):
            yield Static(self._head(f), id="finding-head")
            yield Label("Evidence", classes="section")
            yield Static("\n".join(evidence_lines(f.evidence)) or "—", id="finding-evidence", markup=False)
            if f.location is not None:
                yield Label("Where in the code", classes="section")
                yield Static(location_text(f.location), id="finding-location", markup=False)
            yield Label("Fix", classes="section")
            yield Static(f.fix, id="finding-fix", markup=False)
        gaps = involved_gaps(self.tk.trace.frame("gaps"), d.timeline.gaps, f)
        yield Label(f"Gaps involved ({gaps.height}) · Enter: open on the timeline", classes="section")
        yield FrameTable(gaps, GAP_COLUMNS, id="finding-gaps", empty_text="this finding is not made of idle gaps")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#finding-gaps", FrameTable).focus()

    def _head(self, f: Finding) -> Text:
        d = self.tk.trace.diagnosis
        kind = FINDING_BY_NAME.get(f.kind)
        text = Text()
        text.append(f.title, "bold")
        text.append(f"  [{f.kind}]\n")
        text.append(finding_cost(f) + "\n")
        if f.predicted_step_ms is not None:
            now = "" if d.step_ms_median is None else f" (now {d.step_ms_median:,.2f} ms)"
            text.append(f"predicted step time once fixed: {f.predicted_step_ms:,.2f} ms{now}")
        elif kind is not None and not kind.priced:
            text.append("predicted step time: none (the trace does not record what this time is; the fix records it)", "dim")
        else:
            text.append("predicted step time once fixed: not computed for this trace", "dim")
        return text

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_timeline(self) -> None:
        tk = self.tk
        tk.show_focus(first_occurrence(tk.current[0], tk.trace, self.finding))

    def on_frame_table_row_chosen(self, event: FrameTable.RowChosen) -> None:
        event.stop()
        r = event.row
        tk = self.tk
        tk.show_focus(Focus(tk.current[0], int(r["rank"]), int(r["step"]), int(r["start_ns"]), int(r["end_ns"]), gap_id=int(r["gap_id"])))


__all__ = ["FindingScreen", "evidence_lines", "involved_gaps"]
