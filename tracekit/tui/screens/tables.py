"""The tables: idle gaps, sync points, kernels, steps and operator efficiency — sortable,
filterable, and Enter opens the timeline at the row."""

from __future__ import annotations

from typing import Any, ClassVar

import polars as pl
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.widgets import Footer, Input, Static, TabbedContent, TabPane

from ..bindings import TABLES, bindings
from ..model import Focus, kernel_occurrence
from ..widgets.frame_table import Column, FrameTable, ms, pct, us
from .base import SessionScreen


def _rate(value: Any) -> str:
    return "—" if value is None else f"{value:,.1f}"


TABLE_COLUMNS: dict[str, tuple[Column, ...]] = {
    "gaps": (
        Column("gap_id", "gap", 6, str, "right"),
        Column("rank", "rank", 4, str, "right"),
        Column("step", "step", 5, str, "right"),
        Column("device", "gpu", 3, str, "right"),
        Column("at_ms", "at (ms)", 10, ms, "right"),
        Column("dur_ms", "idle (ms)", 10, ms, "right"),
        Column("cause", "cause", 22),
        Column("thread", "host thread", 16),
    ),
    "syncs": (
        Column("rank", "rank", 4, str, "right"),
        Column("step", "step", 5, str, "right"),
        Column("at_ms", "at (ms)", 10, ms, "right"),
        Column("dur_ms", "blocked (ms)", 12, ms, "right"),
        Column("api", "call", 24),
        Column("op", "operator", 18),
        Column("kind", "kind", 18),
        Column("python_frame", "python", 30),
    ),
    "kernels": (
        Column("name", "kernel", 48),
        Column("category", "category", 12),
        Column("count", "count", 7, str, "right"),
        Column("total_ms", "total (ms)", 11, ms, "right"),
        Column("mean_us", "mean (µs)", 10, us, "right"),
        Column("max_us", "max (µs)", 10, us, "right"),
        Column("share", "share", 6, pct, "right"),
    ),
    "steps": (
        Column("rank", "rank", 4, str, "right"),
        Column("step", "step", 5, str, "right"),
        Column("dur_ms", "time (ms)", 10, ms, "right"),
        Column("utilization", "GPU busy", 8, pct, "right"),
        Column("idle_ms", "idle (ms)", 10, ms, "right"),
        Column("top_idle", "main idle cause", 22),
        Column("complete", "complete", 8),
        Column("source", "found from", 14),
    ),
    "efficiency": (
        Column("name", "operator", 34),
        Column("shape", "shape", 28),
        Column("dtype", "dtype", 5),
        Column("calls", "calls", 6, str, "right"),
        Column("total_ms", "total (ms)", 11, ms, "right"),
        Column("tflops", "TFLOP/s", 8, _rate, "right"),
        Column("gbps", "GB/s", 7, _rate, "right"),
        Column("bound", "bound", 7),
        Column("attainable", "of peak", 7, pct, "right"),
        Column("share", "share", 6, pct, "right"),
    ),
}

TABLE_TITLES = {
    "gaps": "Idle gaps", "syncs": "Sync points", "kernels": "Kernels", "steps": "Steps", "efficiency": "Efficiency",
}
SEARCH = {
    "gaps": ("cause", "thread", "step"),
    "syncs": ("api", "op", "kind", "python_frame"),
    "kernels": ("name", "category"),
    "steps": ("step", "top_idle", "source"),
    "efficiency": ("name", "op_class", "shape", "dtype", "bound"),
}


class TablesScreen(SessionScreen):
    """Five tables of the current trace, one tab each, with one filter box."""

    SPECS = TABLES
    BINDINGS: ClassVar[list[BindingType]] = bindings(TABLES)  # type: ignore[assignment]

    def __init__(self, initial: str = "gaps") -> None:
        super().__init__()
        self.initial = initial

    def compose(self) -> ComposeResult:
        yield Input(placeholder="/ filter rows (case-insensitive)", id="search")
        with TabbedContent(initial=self.initial, id="tabs"):
            for key, columns in TABLE_COLUMNS.items():
                with TabPane(TABLE_TITLES[key], id=key):
                    yield FrameTable(self._frame(key), columns, search=SEARCH[key], id=f"table-{key}")
        yield Static(id="table-status")
        yield Footer()

    def _frame(self, key: str) -> pl.DataFrame:
        return self.tk.trace.frame(key)

    def on_mount(self) -> None:
        self.active_table().focus()
        self._status()

    def selection_changed(self) -> None:
        for key in TABLE_COLUMNS:
            self.query_one(f"#table-{key}", FrameTable).set_frame(self._frame(key))
        self._status()

    def active_key(self) -> str:
        return self.query_one("#tabs", TabbedContent).active or "gaps"

    def active_table(self) -> FrameTable:
        return self.query_one(f"#table-{self.active_key()}", FrameTable)

    def show_table(self, key: str) -> None:
        self.query_one("#tabs", TabbedContent).active = key
        self._tab_changed()

    def _status(self) -> None:
        table = self.active_table()
        bits = [f"{table.row_count:,} of {table.total_rows:,} rows"]
        if table.sort_key:
            bits.append(f"sorted by {table.sort_key} {'descending' if table.sort_descending else 'ascending'}")
        if table.filter_text:
            bits.append(f"filter “{table.filter_text}”")
        bits.append("Enter: open on the timeline · s: sort by column · /: filter")
        self.query_one("#table-status", Static).update(" · ".join(bits))

    def _tab_changed(self) -> None:
        table = self.active_table()
        search = self.query_one("#search", Input)
        if search.value != table.filter_text:
            search.value = table.filter_text
        table.focus()
        self._status()

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        self._tab_changed()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "search":
            table = self.active_table()
            if table.filter_text != event.value.strip():
                table.filter(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.active_table().focus()

    def on_frame_table_changed(self, event: FrameTable.Changed) -> None:
        self._status()

    def action_search(self) -> None:
        self.query_one("#search", Input).focus()

    def action_clear_search(self) -> None:
        search = self.query_one("#search", Input)
        search.value = ""
        self.active_table().filter("")
        self.active_table().focus()

    def action_tab(self, delta: int) -> None:
        keys = list(TABLE_COLUMNS)
        i = keys.index(self.active_key())
        self.show_table(keys[(i + delta) % len(keys)])

    def on_frame_table_row_chosen(self, event: FrameTable.RowChosen) -> None:
        event.stop()
        tk = self.tk
        trace_index = tk.current[0]
        r = event.row
        key = self.active_key()
        focus: Focus | None = None
        if key == "gaps":
            focus = Focus(trace_index, int(r["rank"]), int(r["step"]), int(r["start_ns"]), int(r["end_ns"]), gap_id=int(r["gap_id"]))
        elif key == "syncs" and r.get("step") is not None:
            start = int(r["start_ns"])
            focus = Focus(trace_index, int(r["rank"]), int(r["step"]), start, start + int(1e6 * (r["dur_ms"] or 0)),
                          event_id=int(r["event_id"]))
        elif key == "kernels":
            focus = kernel_occurrence(trace_index, tk.trace, str(r["name"]))
        elif key == "steps":
            focus = Focus(trace_index, int(r["rank"]), int(r["step"]))
        elif key == "efficiency" and r.get("step") is not None:
            focus = Focus(trace_index, int(r["rank"]), int(r["step"]), int(r["start_ns"]), int(r["end_ns"]),
                          event_id=int(r["event_id"]))
        if focus is None:
            self.notify("this row is not inside any step", timeout=2)
            return
        tk.show_focus(focus)


__all__ = ["TABLE_COLUMNS", "TablesScreen"]
