"""A batch output's traces (traces.parquet): pick one to open it."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import polars as pl
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.widgets import Footer, Input, Label

from ..bindings import BATCH, bindings
from ..widgets.frame_table import Column, FrameTable, ms, pct
from .base import SessionScreen

CATALOG_COLUMNS = (
    Column("name", "trace", 36),
    Column("job", "job", 24),
    Column("rank", "rank", 4, lambda v: "—" if v is None else str(v), "right"),
    Column("gpu", "gpu", 16),
    Column("steps", "steps", 5, lambda v: "—" if v is None else str(v), "right"),
    Column("step_ms_median", "step (ms)", 9, ms, "right"),
    Column("gpu_utilization", "GPU busy", 8, pct, "right"),
    Column("gpu_idle_s", "idle (s)", 8, lambda v: "—" if v is None else f"{v:,.2f}", "right"),
    Column("top_finding", "top finding", 22),
    Column("state", "open", 6),
    Column("error", "error", 40),
)


class BatchScreen(SessionScreen):
    """Every trace of the batch output, most GPU idle time first; Enter opens one."""

    SPECS = BATCH
    BINDINGS: ClassVar[list[BindingType]] = bindings(BATCH)  # type: ignore[assignment]

    def compose(self) -> ComposeResult:
        catalog = self.tk.session.catalog
        n = 0 if catalog is None else catalog.height
        yield Label(f"Batch output · {self.tk.session.source} · {n} traces · Enter: open a trace", id="batch-title")
        yield Input(placeholder="/ filter traces (case-insensitive)", id="batch-search")
        yield FrameTable(self._frame(), CATALOG_COLUMNS, search=("name", "job", "gpu", "top_finding", "error"), id="batch-table")
        yield Footer()

    def _frame(self) -> pl.DataFrame:
        catalog = self.tk.session.catalog
        if catalog is None:
            return pl.DataFrame(schema={"path": pl.String})
        opened = [t.path for t in self.tk.session.traces]
        return catalog.with_columns(
            pl.col("path").map_elements(lambda p: Path(str(p)).name, return_dtype=pl.String).alias("name"),
            pl.when(pl.col("path").is_in(opened)).then(pl.lit("open")).otherwise(pl.lit("")).alias("state"),
        )

    def on_mount(self) -> None:
        self.query_one("#batch-table", FrameTable).focus()

    def selection_changed(self) -> None:
        self.query_one("#batch-table", FrameTable).set_frame(self._frame())

    def on_input_changed(self, event: Input.Changed) -> None:
        self.query_one("#batch-table", FrameTable).filter(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.query_one("#batch-table", FrameTable).focus()

    def action_search(self) -> None:
        self.query_one("#batch-search", Input).focus()

    def on_frame_table_row_chosen(self, event: FrameTable.RowChosen) -> None:
        event.stop()
        row = event.row
        if row.get("error"):
            self.notify(f"this trace could not be analysed by the batch: {row['error']}", severity="error", timeout=4)
            return
        self.tk.open_batch_trace(str(row["path"]))


__all__ = ["BatchScreen"]
