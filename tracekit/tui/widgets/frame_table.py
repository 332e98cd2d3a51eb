"""A table over a polars frame that draws only the rows on screen.

Textual's ``DataTable`` stores every row as Python objects; a trace's gap or sync table
can hold hundreds of thousands of rows.  :class:`FrameTable` keeps the frame (filtered and
sorted by polars) and, for each refresh, formats only the page of rows the viewport shows,
so opening, scrolling, sorting and filtering cost the same whatever the row count.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import polars as pl
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import BindingType
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ..bindings import FRAME_TABLE, bindings
from .styles_cache import StyleCache

#: rows formatted at a time (one page is fetched from the frame per cache miss)
_PAGE = 64


def _text(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.3f}"
    return str(value)


@dataclass(frozen=True)
class Column:
    """How one frame column is shown."""

    key: str
    title: str
    width: int
    fmt: Callable[[Any], str] = _text
    justify: Literal["left", "right"] = "left"


def ms(value: Any) -> str:
    return "—" if value is None else f"{value:,.3f}"


def pct(value: Any) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def us(value: Any) -> str:
    return "—" if value is None else f"{value:,.1f}"


class FrameTable(ScrollView, can_focus=True):
    """A sortable, filterable view of a polars frame; Enter posts :class:`FrameTable.RowChosen`."""

    BINDINGS: ClassVar[list[BindingType]] = bindings(FRAME_TABLE)  # type: ignore[assignment]
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "frame-table--header",
        "frame-table--header-cursor",
        "frame-table--cursor",
        "frame-table--cursor-unfocused",
        "frame-table--stripe",
        "frame-table--empty",
    }

    cursor_row: reactive[int] = reactive(0, init=False)
    cursor_column: reactive[int] = reactive(0, init=False)

    @dataclass
    class RowChosen(Message):
        """Enter (or a double click) on a row."""

        table: FrameTable
        row: dict[str, Any]

        @property
        def control(self) -> FrameTable:
            return self.table

    @dataclass
    class Changed(Message):
        """The rows shown changed (filter or sort) or the cursor moved."""

        table: FrameTable

        @property
        def control(self) -> FrameTable:
            return self.table

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, FrameTable.Changed) and message.table is self.table

    def __init__(
        self,
        frame: pl.DataFrame,
        columns: Sequence[Column],
        *,
        search: Sequence[str] = (),
        empty_text: str = "nothing to show",
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.columns = tuple(columns)
        self.search_columns = tuple(search) or tuple(c.key for c in self.columns)
        self.empty_text = empty_text
        self.sort_key: str | None = None
        self.sort_descending = False
        self.filter_text = ""
        self._base = frame
        self._view = frame
        self._pages: dict[int, list[tuple[str, ...]]] = {}
        self._styles = StyleCache(self)
        self.set_frame(frame)

    # ------------------------------------------------------------------ data
    @property
    def total_rows(self) -> int:
        return self._base.height

    @property
    def row_count(self) -> int:
        return self._view.height

    @property
    def view(self) -> pl.DataFrame:
        """The rows shown, in order (without the search helper column)."""
        return self._view.drop("_search", strict=False)

    def set_frame(self, frame: pl.DataFrame) -> None:
        """Replace the data, keeping the filter and sort."""
        self._base = frame
        self._apply()

    def _searchable(self) -> pl.DataFrame:
        """The base frame with its lower-cased search text, built on the first filter only."""
        if "_search" not in self._base.columns:
            search = [pl.col(c).cast(pl.String).fill_null("") for c in self.search_columns if c in self._base.columns]
            if search:
                self._base = self._base.with_columns(pl.concat_str(search, separator=" ").str.to_lowercase().alias("_search"))
        return self._base

    def filter(self, text: str) -> None:
        """Keep the rows whose searchable columns contain ``text`` (case-insensitive)."""
        self.filter_text = text.strip()
        self._apply()

    def sort_by(self, key: str, descending: bool | None = None) -> None:
        """Sort by a column; without ``descending``, a second sort on the same key reverses it."""
        if descending is None:
            descending = not self.sort_descending if key == self.sort_key else self._numeric(key)
        self.sort_key, self.sort_descending = key, descending
        self._apply()

    def _numeric(self, key: str) -> bool:
        dtype = self._base.schema.get(key)
        return bool(dtype is not None and dtype.is_numeric())

    def _apply(self) -> None:
        view = self._base
        if self.filter_text:
            view = self._searchable()
            if "_search" in view.columns:
                view = view.filter(pl.col("_search").str.contains(self.filter_text.lower(), literal=True))
        if self.sort_key is not None and self.sort_key in view.columns:
            view = view.sort(self.sort_key, descending=self.sort_descending, nulls_last=True, maintain_order=True)
        self._view = view
        self._pages.clear()
        self.virtual_size = Size(self._total_width, view.height + 1)
        if not self.is_mounted:
            return
        self.cursor_row = min(self.cursor_row, max(0, view.height - 1))
        self._keep_cursor_visible()
        self.refresh()
        self.post_message(self.Changed(self))

    def current_row(self) -> dict[str, Any] | None:
        """The row under the cursor (all frame columns), or None when the table is empty."""
        if not 0 <= self.cursor_row < self._view.height:
            return None
        return {k: v for k, v in self._view.row(self.cursor_row, named=True).items() if k != "_search"}

    def _cells(self, index: int) -> tuple[str, ...]:
        page = index // _PAGE
        rows = self._pages.get(page)
        if rows is None:
            chunk = self._view.slice(page * _PAGE, _PAGE)
            formatters = [(chunk.columns.index(c.key) if c.key in chunk.columns else -1, c.fmt) for c in self.columns]
            rows = [tuple(fmt(r[i]) if i >= 0 else "" for i, fmt in formatters) for r in chunk.iter_rows()]
            if len(self._pages) > 64:
                self._pages.clear()
            self._pages[page] = rows
        return rows[index - page * _PAGE]

    # ------------------------------------------------------------- drawing
    @property
    def _total_width(self) -> int:
        return sum(c.width + 1 for c in self.columns)

    def _cell(self, text: str, column: Column) -> str:
        w = column.width
        if len(text) > w:
            text = text[: max(0, w - 1)] + "…"
        return text.rjust(w) if column.justify == "right" else text.ljust(w)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        scroll_x, scroll_y = self.scroll_offset
        base = self.rich_style
        if y == 0:
            header = self._style("frame-table--header")
            active = self._style("frame-table--header-cursor")
            segments = []
            for i, col in enumerate(self.columns):
                title = col.title
                if col.key == self.sort_key:
                    title += " ▼" if self.sort_descending else " ▲"
                style = active if (i == self.cursor_column and self.has_focus) else header
                segments.append(Segment(self._cell(title, col) + " ", style))
            return self._finish(segments, scroll_x, width, header)
        index = scroll_y + y - 1
        if self._view.height == 0:
            if y == 1:
                return self._finish([Segment(" " + self.empty_text, self._style("frame-table--empty"))],
                                    0, width, base)
            return Strip.blank(width, base)
        if index >= self._view.height:
            return Strip.blank(width, base)
        cells = self._cells(index)
        if index == self.cursor_row:
            name = "frame-table--cursor" if self.has_focus else "frame-table--cursor-unfocused"
            style = base + self._style(name, partial=True)
        elif index % 2:
            style = base + self._style("frame-table--stripe", partial=True)
        else:
            style = base
        segments = [Segment(self._cell(text, col) + " ", style) for text, col in zip(cells, self.columns, strict=True)]
        return self._finish(segments, scroll_x, width, style)

    def _style(self, name: str, *, partial: bool = False) -> Style:
        """A component style from app.tcss, cached until the styles change."""
        return self._styles.get(name, partial=partial)

    def notify_style_update(self) -> None:
        self._styles.clear()
        super().notify_style_update()

    def _finish(self, segments: list[Segment], scroll_x: int, width: int, fill: Style) -> Strip:
        strip = Strip(segments).crop(scroll_x, scroll_x + width)
        return strip.extend_cell_length(width, fill)

    # ---------------------------------------------------------- navigation
    def _keep_cursor_visible(self) -> None:
        visible = max(1, self.scrollable_content_region.height - 1)
        top = int(self.scroll_offset.y)
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False, immediate=True)
        elif self.cursor_row >= top + visible:
            self.scroll_to(y=self.cursor_row - visible + 1, animate=False, immediate=True)

    def on_mount(self) -> None:
        self.virtual_size = Size(self._total_width, self._view.height + 1)

    def watch_cursor_row(self) -> None:
        self._keep_cursor_visible()
        self.refresh()
        self.post_message(self.Changed(self))

    def watch_cursor_column(self) -> None:
        self.refresh()

    def _move_to(self, row: int) -> None:
        self.cursor_row = max(0, min(row, self._view.height - 1))

    def action_cursor(self, delta: int) -> None:
        self._move_to(self.cursor_row + delta)

    def action_page(self, delta: int) -> None:
        self._move_to(self.cursor_row + delta * max(1, self.scrollable_content_region.height - 2))

    def action_edge(self, direction: int) -> None:
        self._move_to(0 if direction < 0 else self._view.height - 1)

    def action_column(self, delta: int) -> None:
        self.cursor_column = max(0, min(self.cursor_column + delta, len(self.columns) - 1))
        left = sum(c.width + 1 for c in self.columns[: self.cursor_column])
        right = left + self.columns[self.cursor_column].width
        x = int(self.scroll_offset.x)
        if left < x:
            self.scroll_to(x=left, animate=False)
        elif right > x + self.scrollable_content_region.width:
            self.scroll_to(x=right - self.scrollable_content_region.width + 1, animate=False)

    def action_sort(self) -> None:
        self.sort_by(self.columns[self.cursor_column].key)

    def action_choose(self) -> None:
        row = self.current_row()
        if row is not None:
            self.post_message(self.RowChosen(self, row))

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

    def _column_at(self, x: int) -> int | None:
        edge = 0
        for i, col in enumerate(self.columns):
            edge += col.width + 1
            if x < edge:
                return i
        return None

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        if offset.y == 0:
            column = self._column_at(offset.x + int(self.scroll_offset.x))
            if column is not None:
                self.cursor_column = column
                self.action_sort()
            return
        row = int(self.scroll_offset.y) + offset.y - 1
        if 0 <= row < self._view.height:
            if row == self.cursor_row and event.chain >= 2:
                self.action_choose()
            self.cursor_row = row


__all__ = ["Column", "FrameTable", "ms", "pct", "us"]
