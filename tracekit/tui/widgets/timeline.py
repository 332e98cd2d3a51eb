"""The step timeline: CPU thread lanes, GPU stream lanes, idle gaps by cause, sync points and
the critical path, drawn from a :class:`~tracekit.analysis.view.StepView`.

Drawing uses Textual's line API and costs O(columns × log events) per lane, whatever the
zoom: each lane keeps its events sorted by start with a running maximum of their ends, so
the event under a screen column is one binary search.  Events shorter than a column still
take one column (a 2 µs kernel stays visible in a 100 ms step); when several fall in the
same column the last one to start is drawn.  Only the lanes on screen are drawn.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

import polars as pl
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.message import Message
from textual.strip import Strip

from ...analysis.causes import CP_CAUSES, IDLE_CAUSES
from ...analysis.view import StepView
from ...report.formatting import scale_ns
from ..model import fmt_ns
from ..styles import CauseStyled
from .styles_cache import StyleCache

#: width of the lane labels on the left, in cells
LABEL_WIDTH = 24
#: the narrowest window one can zoom to, in ns per column
MIN_NS_PER_COLUMN = 10.0
#: nesting depths shown per CPU thread, cycled by the ``d`` key
DEPTH_CHOICES = (3, 6, 1)

KIND_STYLES = {
    "kernel": "timeline--kernel",
    "memcpy": "timeline--memcpy",
    "memset": "timeline--memcpy",
    "runtime": "timeline--runtime",
    "driver": "timeline--runtime",
    "sync": "timeline--sync",
    "annotation": "timeline--annotation",
    "gpu_annotation": "timeline--annotation",
    "python": "timeline--python",
}


@dataclass
class Lane:
    """One drawn row: entries sorted by start, with what the lane is."""

    #: "track" (a CPU thread or GPU stream at one depth), "idle" (a device's gaps),
    #: "syncs" (sync points), "path" (critical-path segments)
    kind: str
    label: str
    track: str | None = None
    device: int | None = None
    depth: int = 0
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    styles: list[str] = field(default_factory=list)
    #: event_id for tracks, syncs and path segments (-1 when none); gap_id for idle lanes
    ids: list[int] = field(default_factory=list)
    _reach: list[int] = field(default_factory=list)
    _reach_at: list[int] = field(default_factory=list)

    @classmethod
    def from_frame(cls, kind: str, label: str, frame: pl.DataFrame, **extra: object) -> Lane:
        """A lane from a frame of start, end, name, style, id (any order; times relative to the step).

        Sorted by start (longest first on ties) with the running maximum of ends and the
        entry that reaches it, all in polars: a lane of 50,000 events builds in milliseconds.
        """
        f = (
            frame.select(
                pl.col("start").cast(pl.Int64), pl.col("end").cast(pl.Int64), pl.col("name").cast(pl.String).fill_null(""),
                pl.col("style").cast(pl.String), pl.col("id").cast(pl.Int64).fill_null(-1),
            )
            .sort(["start", "end"], descending=[False, True])
            .with_row_index("_i")
            .with_columns(pl.col("end").cum_max().alias("_reach"))
            .with_columns(
                pl.when(pl.col("end") == pl.col("_reach")).then(pl.col("_i")).forward_fill().cast(pl.Int64).alias("_reach_at")
            )
        )
        lane = cls(kind, label, **extra)  # type: ignore[arg-type]
        lane.starts, lane.ends = f["start"].to_list(), f["end"].to_list()
        lane.names, lane.styles, lane.ids = f["name"].to_list(), f["style"].to_list(), f["id"].to_list()
        lane._reach, lane._reach_at = f["_reach"].to_list(), f["_reach_at"].to_list()
        return lane

    def owner(self, a: float, b: float) -> int | None:
        """The entry drawn in the time span [a, b): the last to start before b that reaches past a."""
        i = bisect_left(self.starts, math.ceil(b)) - 1
        if i < 0 or self._reach[i] <= a:
            return None
        return i if self.ends[i] > a else self._reach_at[i]

    def nearest(self, t: float) -> int | None:
        """The entry closest to the instant ``t`` (None for an empty lane)."""
        if not self.starts:
            return None
        i = bisect_right(self.starts, t)
        best, best_d = None, math.inf
        for j in (i - 2, i - 1, i):
            if 0 <= j < len(self.starts):
                d = 0.0 if self.starts[j] <= t < self.ends[j] else min(abs(self.starts[j] - t), abs(self.ends[j] - t))
                if d < best_d:
                    best, best_d = j, d
        return best


@dataclass(frozen=True)
class Pick:
    """What is selected: a lane and one of its entries."""

    lane: int
    entry: int


class TimelineView(CauseStyled, can_focus=True):
    """The timeline of one step.  Posts :class:`TimelineView.Selected` when the selection changes."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "timeline--ruler",
        "timeline--label",
        "timeline--label-current",
        "timeline--empty",
        "timeline--outside",
        "timeline--busy",
        "timeline--cpu",
        "timeline--python",
        "timeline--runtime",
        "timeline--annotation",
        "timeline--kernel",
        "timeline--memcpy",
        "timeline--sync",
        "timeline--critical",
        "timeline--path",
        "timeline--selected",
    }
    CAUSE_CLASSES = (("timeline--gap-", IDLE_CAUSES), ("timeline--path-", CP_CAUSES))

    @dataclass
    class Selected(Message):
        """The selection moved to ``lane``'s ``entry``."""

        timeline: TimelineView
        lane: Lane
        entry: int

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, TimelineView.Selected)

    @dataclass
    class WindowChanged(Message):
        """Zoom or pan changed the visible time window."""

        timeline: TimelineView

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, TimelineView.WindowChanged)

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.view: StepView | None = None
        self.lanes: list[Lane] = []
        self.window: tuple[float, float] = (0.0, 1.0)
        self.pick: Pick | None = None
        self.top = 0
        self.depth_limit = DEPTH_CHOICES[0]
        self.show_path = True
        self._gaps = pl.DataFrame()
        self._critical: pl.DataFrame | None = None
        self._critical_ids: set[int] = set()
        self._drag_x: int | None = None
        self._styles = StyleCache(self)
        #: lanes and the window hold times relative to the step start (absolute ns do not fit a float)
        self.origin = 0

    # ------------------------------------------------------------- model
    def show(
        self,
        view: StepView,
        gaps: pl.DataFrame,
        critical: pl.DataFrame | None = None,
        *,
        span: tuple[int, int] | None = None,
        event_id: int | None = None,
        gap_id: int | None = None,
        lanes: list[Lane] | None = None,
    ) -> None:
        """Draw ``view`` (with the step's ``gaps`` frame: gap_id, device, start_ns, end_ns, cause, dur_ns).

        ``lanes``, when given, are :func:`build_lanes` of the same arguments, built in a worker.
        """
        self.view, self._gaps, self._critical = view, gaps, critical
        self.origin = view.start_ns
        self._critical_ids = set()
        if critical is not None and "event_id" in critical.columns:
            self._critical_ids = {int(e) for e in critical["event_id"].drop_nulls().to_list()}
        if lanes is None:
            self._build_lanes()
        else:
            self.lanes = lanes
        self.top = 0
        self.pick = None
        self.fit()
        if gap_id is not None:
            self.select_id("idle", gap_id)
        elif event_id is not None:
            self.select_id("track", event_id) or self.select_id("syncs", event_id)
        if span is not None:
            self.zoom_to(*span)
        if self.pick is None:
            self._select_first()
        self.refresh()

    def _build_lanes(self) -> None:
        assert self.view is not None
        self.lanes = build_lanes(
            self.view, self._gaps, self._critical if self.show_path else None, depth_limit=self.depth_limit
        )

    # ------------------------------------------------------- selection
    def selected(self) -> tuple[Lane, int] | None:
        if self.pick is None or self.pick.lane >= len(self.lanes):
            return None
        return self.lanes[self.pick.lane], self.pick.entry

    def _set_pick(self, pick: Pick | None, *, reveal: bool = True) -> None:
        self.pick = pick
        if pick is not None:
            lane = self.lanes[pick.lane]
            self._reveal_lane(pick.lane)
            if reveal:
                self._reveal_span(lane.starts[pick.entry], lane.ends[pick.entry])
            self.post_message(self.Selected(self, lane, pick.entry))
        self.refresh()

    def _select_first(self) -> None:
        for i, lane in enumerate(self.lanes):
            if lane.kind == "track" and lane.starts:
                self._set_pick(Pick(i, 0), reveal=False)
                return

    def select_id(self, kind: str, ident: int) -> bool:
        """Select the entry with this id in a lane of ``kind``; False when there is none."""
        for i, lane in enumerate(self.lanes):
            if lane.kind == kind and ident in lane.ids:
                self._set_pick(Pick(i, lane.ids.index(ident)))
                return True
        return False

    def select_event(self, delta: int) -> None:
        """Move to the previous/next entry of the selected lane."""
        if self.pick is None:
            self._select_first()
            return
        lane = self.lanes[self.pick.lane]
        entry = max(0, min(self.pick.entry + delta, len(lane.starts) - 1))
        self._set_pick(Pick(self.pick.lane, entry))

    def select_lane(self, delta: int) -> None:
        """Move to the lane above or below, picking its entry nearest to the current one."""
        if not self.lanes:
            return
        current = self.pick.lane if self.pick else 0
        at = self._center()
        if self.pick is not None:
            lane = self.lanes[self.pick.lane]
            at = (lane.starts[self.pick.entry] + lane.ends[self.pick.entry]) / 2
        i = current
        while 0 <= i + delta < len(self.lanes):
            i += delta
            entry = self.lanes[i].nearest(at)
            if entry is not None:
                self._set_pick(Pick(i, entry))
                return

    def next_gap(self, direction: int) -> bool:
        """Select the next (or previous) idle gap after the selection, across devices."""
        at = self._center()
        if self.pick is not None:
            lane = self.lanes[self.pick.lane]
            at = lane.starts[self.pick.entry]
        best: tuple[float, int, int] | None = None
        for li, lane in enumerate(self.lanes):
            if lane.kind != "idle":
                continue
            for ei, start in enumerate(lane.starts):
                if (direction > 0 and start > at) or (direction < 0 and start < at):
                    d = abs(start - at)
                    if best is None or d < best[0]:
                        best = (d, li, ei)
        if best is None:
            return False
        self._set_pick(Pick(best[1], best[2]))
        return True

    # ----------------------------------------------------- zoom and pan
    @property
    def _columns(self) -> int:
        return max(1, self.size.width - LABEL_WIDTH)

    def _bounds(self) -> tuple[float, float]:
        if self.view is None:
            return 0.0, 1.0
        span = self.view.end_ns - self.view.start_ns
        margin = max(span * 0.05, 1000)
        return -margin, span + margin

    def _center(self) -> float:
        return (self.window[0] + self.window[1]) / 2

    def _set_window(self, start: float, end: float) -> None:
        lo, hi = self._bounds()
        width = max(end - start, MIN_NS_PER_COLUMN * self._columns)
        width = min(width, hi - lo)
        start = max(lo, min(start, hi - width))
        self.window = (start, start + width)
        self.post_message(self.WindowChanged(self))
        self.refresh()

    def fit(self) -> None:
        """Show the whole step."""
        if self.view is None:
            return
        span = max(1, self.view.end_ns - self.view.start_ns)
        pad = span * 0.01
        self._set_window(-pad, span + pad)

    def zoom(self, factor: float, at: float | None = None) -> None:
        """Scale the window by ``factor`` (< 1 zooms in) around ``at`` (default: the selection)."""
        if at is None:
            at = self._center()
            sel = self.selected()
            if sel is not None:
                lane, entry = sel
                mid = (lane.starts[entry] + lane.ends[entry]) / 2
                if self.window[0] <= mid <= self.window[1]:
                    at = mid
        start, end = self.window
        rel = (at - start) / (end - start) if end > start else 0.5
        width = (end - start) * factor
        self._set_window(at - rel * width, at - rel * width + width)

    def zoom_to(self, start: int, end: int) -> None:
        """Show the absolute span [start, end) ns in the middle third of the window."""
        start, end = start - self.origin, end - self.origin
        span = max(end - start, 1)
        self._set_window(start - span, end + span)

    def pan(self, fraction: float) -> None:
        start, end = self.window
        shift = (end - start) * fraction
        self._set_window(start + shift, end + shift)

    def _reveal_span(self, start: int, end: int) -> None:
        w0, w1 = self.window
        if start >= w0 and end <= w1:
            return
        if end - start > w1 - w0:
            if start <= w1 and end >= w0:
                return  # longer than the window and already on screen
            self._set_window(start, start + (w1 - w0))
            return
        mid = (start + end) / 2
        half = (w1 - w0) / 2
        self._set_window(mid - half, mid + half)

    def _reveal_lane(self, index: int) -> None:
        if self.size.height < 2:
            return  # not laid out yet: on_resize reveals the selection
        rows = self.size.height - 1
        if index < self.top:
            self.top = index
        elif index >= self.top + rows:
            self.top = index - rows + 1

    def cycle_depth(self, *, rebuild: bool = True) -> int:
        """Show more (or fewer) nesting levels per CPU thread; returns the new limit.

        Without ``rebuild`` only the setting changes: the caller passes lanes built for it to
        :meth:`replace_lanes` (the timeline screen builds them in a worker on big traces).
        """
        i = DEPTH_CHOICES.index(self.depth_limit) if self.depth_limit in DEPTH_CHOICES else 0
        self.depth_limit = DEPTH_CHOICES[(i + 1) % len(DEPTH_CHOICES)]
        if rebuild:
            self.replace_lanes(None)
        return self.depth_limit

    def toggle_path(self, *, rebuild: bool = True) -> bool:
        """Show or hide the critical path (lane and highlight); returns whether it is shown."""
        self.show_path = not self.show_path
        if rebuild:
            self.replace_lanes(None)
        return self.show_path

    def replace_lanes(self, lanes: list[Lane] | None) -> None:
        """Draw new lanes for the same step (built here when None), keeping the selection."""
        if self.view is None:
            return
        keep = None
        sel = self.selected()
        if sel is not None:
            lane, entry = sel
            keep = (lane.kind, lane.ids[entry])
        if lanes is None:
            self._build_lanes()
        else:
            self.lanes = lanes
        self.pick = None
        self.top = 0
        if keep is not None:
            self.select_id(*keep)
        self.refresh()

    def on_resize(self) -> None:
        if self.pick is not None:
            self._reveal_lane(self.pick.lane)
        if self.view is not None:
            self._set_window(*self.window)

    # ----------------------------------------------------------- mouse
    def _time_at(self, x: int) -> float:
        start, end = self.window
        return start + (x - LABEL_WIDTH + 0.5) * (end - start) / self._columns

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        event.stop()
        at = self._time_at(event.x) if event.x >= LABEL_WIDTH else None
        self.zoom(0.8, at)

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        event.stop()
        at = self._time_at(event.x) if event.x >= LABEL_WIDTH else None
        self.zoom(1.25, at)

    def on_mouse_down(self, event: events.MouseDown) -> None:
        if event.x >= LABEL_WIDTH:
            self._drag_x = event.x
            self.capture_mouse()

    def on_mouse_move(self, event: events.MouseMove) -> None:
        if self._drag_x is not None and event.button:
            delta = event.x - self._drag_x
            if delta:
                self.pan(-delta / self._columns)
                self._drag_x = event.x

    def on_mouse_up(self, event: events.MouseUp) -> None:
        self._drag_x = None
        self.release_mouse()

    def on_click(self, event: events.Click) -> None:
        index = self.top + event.y - 1
        if event.y < 1 or not 0 <= index < len(self.lanes):
            return
        lane = self.lanes[index]
        if event.x >= LABEL_WIDTH:
            start, end = self.window
            npc = (end - start) / self._columns
            a = start + (event.x - LABEL_WIDTH) * npc
            entry = lane.owner(a, a + npc)
        else:
            entry = lane.nearest(self._center())
        if entry is not None:
            self._set_pick(Pick(index, entry), reveal=False)

    # --------------------------------------------------------- drawing
    def _style(self, name: str, *, partial: bool = False) -> Style:
        """A component style from app.tcss, cached until the styles change (each lookup builds caches)."""
        return self._styles.get(name, partial=partial)

    def notify_style_update(self) -> None:
        self._styles.clear()
        super().notify_style_update()

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if self.view is None:
            return Strip.blank(width, self.rich_style)
        if y == 0:
            return self._ruler(width)
        index = self.top + y - 1
        if index >= len(self.lanes):
            return Strip.blank(width, self.rich_style)
        return self._lane(index, width)

    def _ruler(self, width: int) -> Strip:
        assert self.view is not None
        style = self._style("timeline--ruler")
        cols = self._columns
        start, end = self.window
        npc = (end - start) / cols
        step = _nice_step(npc * 14)
        chars = [" "] * cols
        t = math.ceil(start / step) * step
        while t < end:
            c = int((t - start) / npc)
            label = "┊" + _short(t)
            if 0 <= c < cols:
                for k, ch in enumerate(label):
                    if c + k < cols and (k == 0 or chars[c + k] == " "):
                        chars[c + k] = ch
            t += step
        head = f"{fmt_ns(end - start)} shown".ljust(LABEL_WIDTH - 1)[: LABEL_WIDTH - 1] + "│"
        return Strip([Segment(head, style), Segment("".join(chars), style)]).extend_cell_length(width, style)

    def _lane(self, index: int, width: int) -> Strip:
        assert self.view is not None
        lane = self.lanes[index]
        current = self.pick is not None and self.pick.lane == index
        label_style = self._style("timeline--label-current" if current else "timeline--label")
        label = lane.label[: LABEL_WIDTH - 1].ljust(LABEL_WIDTH - 1) + "│"
        segments = [Segment(label, label_style)]
        cols = self._columns
        start, end = self.window
        npc = (end - start) / cols
        owners = [lane.owner(start + c * npc, start + (c + 1) * npc) for c in range(cols)]
        empty = self._style("timeline--empty")
        outside = self._style("timeline--outside")
        busy = self._style("timeline--busy")
        selected = self.pick.entry if current and self.pick is not None else None
        highlight = self.show_path and bool(self._critical_ids) and lane.kind == "track"
        c = 0
        while c < cols:
            owner = owners[c]
            run = c
            while run < cols and owners[run] == owner:
                run += 1
            n = run - c
            if owner is None:
                segments.extend(self._blank_run(c, n, start, npc, lane, empty, outside, busy))
            else:
                style = self._style(lane.styles[owner])
                if highlight and lane.ids[owner] in self._critical_ids:
                    style = style + self._style("timeline--critical", partial=True)
                if owner == selected:
                    style = style + self._style("timeline--selected", partial=True)
                text = lane.names[owner]
                if c > 0 and owners[c - 1] is not None:
                    text = "▏" + text
                text = (text[:n] if n >= 3 else " " * n).ljust(n)
                segments.append(Segment(text, style))
            c = run
        return Strip(segments).extend_cell_length(width, empty).crop(0, width)

    def _blank_run(
        self, c: int, n: int, start: float, npc: float, lane: Lane, empty: Style, outside: Style, busy: Style
    ) -> Iterable[Segment]:
        assert self.view is not None
        s0, s1 = 0, self.view.end_ns - self.view.start_ns
        out: list[Segment] = []
        for k in range(c, c + n):
            t = start + (k + 0.5) * npc
            inside = s0 <= t < s1
            if lane.kind == "idle" and inside:
                out.append(Segment("━", busy))
            elif inside:
                out.append(Segment(" ", empty))
            else:
                out.append(Segment("░", outside))
        return _merge(out)


def build_lanes(view: StepView, gaps: pl.DataFrame, critical: pl.DataFrame | None, *, depth_limit: int) -> list[Lane]:
    """The lanes of a step view, top to bottom: critical path, sync points, then each CPU thread
    (one lane per nesting depth up to ``depth_limit``) and each GPU device (its idle gaps, then
    its streams).  Pure: safe to run in a worker thread."""
    origin = view.start_ns
    lanes: list[Lane] = []
    if critical is not None and critical.height:
        cause = pl.col("cause").cast(pl.String)
        frame = critical.select(
            (pl.col("start_ns") - origin).alias("start"), (pl.col("end_ns") - origin).alias("end"),
            pl.coalesce(cause, pl.col("edge_kind").cast(pl.String), pl.lit("path")).alias("name"),
            pl.when(cause.is_in(list(CP_CAUSES))).then(pl.format("timeline--path-{}", cause))
            .otherwise(pl.lit("timeline--path")).alias("style"),
            pl.col("event_id").alias("id"),
        )
        lanes.append(Lane.from_frame("path", "critical path", frame))
    if view.syncs.height:
        frame = view.syncs.select(
            (pl.col("start_ns") - origin).alias("start"),
            (pl.col("start_ns") - origin + pl.max_horizontal(pl.col("dur_ns").fill_null(0), pl.lit(1))).alias("end"),
            pl.coalesce(pl.col("op"), pl.col("api"), pl.lit("sync")).alias("name"),
            pl.lit("timeline--sync").alias("style"),
            pl.col("event_id").alias("id"),
        )
        lanes.append(Lane.from_frame("syncs", "sync points", frame))
    events = view.events.select(
        "track", "depth", (pl.col("start_ns") - origin).alias("start"), (pl.col("end_ns") - origin).alias("end"), "name",
        pl.col("kind").cast(pl.String).replace_strict(KIND_STYLES, default="timeline--cpu", return_dtype=pl.String).alias("style"),
        pl.col("event_id").alias("id"),
    )
    by_lane: dict[tuple[str, int], pl.DataFrame] = {}
    if events.height:
        for (track, depth), part in events.partition_by(["track", "depth"], as_dict=True).items():
            by_lane[(str(track), int(depth))] = part
    max_depth: dict[str, int] = {}
    for track, depth in by_lane:
        max_depth[track] = max(max_depth.get(track, 0), depth)
    devices_drawn: set[int] = set()
    for track, label, side in view.tracks.select("track", "label", "side").iter_rows():
        if side == "gpu":
            device = int(track.split()[1].split("/")[0])
            if device not in devices_drawn:
                devices_drawn.add(device)
                lanes.append(_idle_lane(gaps, device, origin))
        if track not in max_depth:
            continue
        for depth in range(min(max_depth[track] + 1, depth_limit)):
            lane_rows = by_lane.get((track, depth))
            if lane_rows is None:
                continue
            name = label if depth == 0 else f"  {'·' * depth} depth {depth}"
            lanes.append(Lane.from_frame("track", name, lane_rows, track=track, depth=depth))
    for device in sorted(set(gaps["device"].to_list()) - devices_drawn) if gaps.height else []:
        lanes.append(_idle_lane(gaps, int(device), origin))
    return lanes


def _idle_lane(gaps: pl.DataFrame, device: int, origin: int) -> Lane:
    """A device's idle gaps, coloured by cause and labelled with it and their length."""
    frame = pl.DataFrame(schema={"start": pl.Int64, "end": pl.Int64, "name": pl.String, "style": pl.String, "id": pl.Int64})
    if gaps.height:
        frame = gaps.filter(pl.col("device") == device).select(
            (pl.col("start_ns") - origin).alias("start"), (pl.col("end_ns") - origin).alias("end"),
            (pl.col("cause").cast(pl.String) + " " + _duration_text(pl.col("dur_ns"))).alias("name"),
            pl.format("timeline--gap-{}", "cause").alias("style"),
            pl.col("gap_id").alias("id"),
        )
    return Lane.from_frame("idle", f"GPU {device} idle", frame, device=device)


def _duration_text(ns: pl.Expr) -> pl.Expr:
    """fmt_ns as a polars expression (µs below a millisecond, ms above)."""
    return (
        pl.when(ns < 1_000_000)
        .then((ns / 1e3).round(1).cast(pl.String) + " µs")
        .otherwise((ns / 1e6).round(2).cast(pl.String) + " ms")
    )


def _merge(segments: list[Segment]) -> list[Segment]:
    merged: list[Segment] = []
    for seg in segments:
        if merged and merged[-1].style == seg.style:
            merged[-1] = Segment(merged[-1].text + seg.text, seg.style)
        else:
            merged.append(seg)
    return merged


def _nice_step(ns: float) -> float:
    """1, 2 or 5 times a power of ten, at least ``ns``."""
    if ns <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(ns))
    for m in (1, 2, 5, 10):
        if m * power >= ns:
            return float(m * power)
    return float(10 * power)


def _short(ns: float) -> str:
    if ns == 0:
        return "0"
    value, unit = scale_ns(ns)
    return f"{ns:.0f}ns" if unit == "ns" else f"{round(value, 6):g}{unit}"


__all__ = ["DEPTH_CHOICES", "LABEL_WIDTH", "Lane", "Pick", "TimelineView", "build_lanes"]
