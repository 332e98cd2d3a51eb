"""Small charts for the overview: the step-time breakdown and GPU utilization per step.

Colours come from component classes styled in ``app.tcss`` (one per cause), so the bars
use the same colours as the timeline's idle gaps.
"""

from __future__ import annotations

from typing import ClassVar

from rich.console import RenderableType
from rich.text import Text
from textual.widget import Widget

from ...report.formatting import CAUSES, IDLE_CAUSES, SHORT_LABELS, cause_label
from ..styles import CauseStyled

_EIGHTHS = " ▁▂▃▄▅▆▇█"


class BreakdownChart(CauseStyled):
    """Where the step time goes: one bar per cause (ms per step and share of the step)."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"breakdown--title", "breakdown--label"}
    CAUSE_CLASSES = (("breakdown--", CAUSES),)

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[tuple[str, float, float]] = []

    def set_rows(self, rows: list[tuple[str, float, float]]) -> None:
        self.rows = rows
        self.refresh(layout=True)

    def get_content_height(self, container: object, viewport: object, width: int) -> int:
        return max(2, len(self.rows) + 1)

    def render(self) -> RenderableType:
        text = Text()
        text.append("Where the step time goes (ms per step)\n", self.get_component_rich_style("breakdown--title"))
        if not self.rows:
            text.append("no complete step with GPU activity", self.get_component_rich_style("breakdown--label"))
            return text
        bar_width = max(4, self.size.width - 40)
        for cause, ms, share in self.rows:
            label = cause_label(cause)
            text.append(f"{label:<22}{ms:>9,.2f} {100 * share:5.1f}% ", self.get_component_rich_style("breakdown--label"))
            cells = share * bar_width
            full = int(cells)
            bar = "█" * full + (_EIGHTHS[int((cells - full) * 8)] if full < bar_width else "")
            text.append(bar.rstrip() or "▏", self.get_component_rich_style(f"breakdown--{cause}"))
            text.append("\n")
        text.rstrip()
        return text


class StepBars(Widget):
    """GPU utilization of each step as vertical bars (0-100%), partial steps dimmed."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"step-bars--title", "step-bars--bar", "step-bars--partial", "step-bars--axis"}

    #: rows of bars
    BAR_ROWS = 4

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.steps: list[int] = []
        self.values: list[float | None] = []
        self.complete: list[bool] = []

    def set_data(self, steps: list[int], values: list[float | None], complete: list[bool]) -> None:
        self.steps, self.values, self.complete = steps, values, complete
        self.refresh()

    def _columns(self, width: int) -> list[tuple[float | None, bool]]:
        """One (utilization, complete) per column; steps are averaged when they outnumber the columns."""
        n = len(self.values)
        if n <= width:
            return list(zip(self.values, self.complete, strict=True))
        out: list[tuple[float | None, bool]] = []
        for c in range(width):
            lo, hi = c * n // width, max(c * n // width + 1, (c + 1) * n // width)
            vals = [v for v in self.values[lo:hi] if v is not None]
            out.append((sum(vals) / len(vals) if vals else None, all(self.complete[lo:hi])))
        return out

    def render(self) -> RenderableType:
        title = self.get_component_rich_style("step-bars--title")
        text = Text()
        text.append("GPU utilization per step\n", title)
        known = [v for v in self.values if v is not None]
        if not known:
            text.append("no GPU activity measured", self.get_component_rich_style("step-bars--axis"))
            return text
        width = max(1, self.size.width - 5)
        cols = self._columns(width)
        bar, partial = self.get_component_rich_style("step-bars--bar"), self.get_component_rich_style("step-bars--partial")
        axis = self.get_component_rich_style("step-bars--axis")
        for row in range(self.BAR_ROWS, 0, -1):
            text.append({self.BAR_ROWS: "100%", 1: "  0%"}.get(row, "    ") + "▕", axis)
            for value, complete in cols:
                level = 0.0 if value is None else value * self.BAR_ROWS * 8
                cell = max(0, min(8, round(level - (row - 1) * 8)))
                text.append(_EIGHTHS[cell], bar if complete else partial)
            text.append("\n")
        lo, hi = min(known), max(known)
        first, last = (self.steps[0], self.steps[-1]) if self.steps else (0, 0)
        text.append(f"     steps {first}–{last} · min {100 * lo:.1f}% · max {100 * hi:.1f}%", axis)
        return text

    def get_content_height(self, container: object, viewport: object, width: int) -> int:
        return self.BAR_ROWS + 2


class GapLegend(CauseStyled):
    """One line naming the colour of each idle cause."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"legend--title"}
    CAUSE_CLASSES = (("legend--", IDLE_CAUSES),)

    def render(self) -> RenderableType:
        text = Text("idle gaps: ", self.get_component_rich_style("legend--title"))
        for cause in IDLE_CAUSES:
            text.append(f" {SHORT_LABELS[cause]} ", self.get_component_rich_style(f"legend--{cause}"))
            text.append(" ")
        return text

    def get_content_height(self, container: object, viewport: object, width: int) -> int:
        return 1


__all__ = ["BreakdownChart", "GapLegend", "StepBars"]
