"""The timeline of one step, with the details of the selected event, gap or sync point."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import ClassVar

import polars as pl
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Footer, Input, Label, Static
from textual.worker import Worker, WorkerState

from ...analysis.view import StepView
from ...report.formatting import IDLE_CAUSES, cause_label
from ..bindings import TIMELINE, bindings
from ..model import Focus, critical_segments, event_args, event_row, fmt_ns, linked_events
from ..session import LoadedTrace
from ..widgets.charts import GapLegend
from ..widgets.timeline import Lane, TimelineView, build_lanes
from .base import SessionScreen

#: events drawn per step at most (the longest are kept; see tracekit.analysis.view)
MAX_EVENTS = 50_000
#: step views kept in memory
VIEW_CACHE = 8
#: traces with at least this many events build step views in a worker thread (smaller ones at once)
ASYNC_EVENTS = 50_000


@dataclass(frozen=True)
class StepData:
    """What the timeline draws for one step."""

    view: StepView
    #: the step's idle gaps (all columns of Timeline.gaps)
    gaps: pl.DataFrame
    #: its critical-path segments, None when the diagnosis has no critical path
    critical: pl.DataFrame | None
    #: lanes already built, by (depth limit, critical path shown)
    lanes: dict[tuple[int, bool], list[Lane]] = field(default_factory=dict, compare=False, repr=False)

    def lanes_for(self, depth_limit: int, show_path: bool) -> list[Lane]:
        """The lanes to draw (built once per setting)."""
        key = (depth_limit, show_path)
        if key not in self.lanes:
            self.lanes[key] = build_lanes(self.view, self.gaps, self.critical if show_path else None, depth_limit=depth_limit)
        return self.lanes[key]


def build_step(trace: LoadedTrace, focus: Focus) -> StepData:
    """The step view of ``focus`` with its gaps and critical path (pure: runs in worker threads)."""
    d = trace.diagnosis
    view = trace.result.step_view(focus.rank, focus.step, max_events=MAX_EVENTS)
    gaps = d.timeline.gaps.filter((pl.col("rank") == focus.rank) & (pl.col("step") == focus.step))
    return StepData(view, gaps, critical_segments(d, focus.rank, focus.step))


class StepPicker(ModalScreen[str | None]):
    """Ask for a step number (``7``, or ``rank:step`` such as ``1:7``)."""

    BINDINGS: ClassVar[list[BindingType]] = [("escape", "dismiss_none", "Cancel")]

    def __init__(self, hint: str) -> None:
        super().__init__()
        self.hint = hint

    def compose(self) -> ComposeResult:
        with Vertical(id="picker-box"):
            yield Label("Go to step", id="picker-title")
            yield Input(placeholder="step  or  rank:step", id="picker-input")
            yield Label(self.hint, id="picker-hint")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)


class TimelineScreen(SessionScreen):
    """CPU threads and GPU streams of one step; gaps by cause, syncs, the critical path."""

    SPECS = TIMELINE
    BINDINGS: ClassVar[list[BindingType]] = bindings(TIMELINE)  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.focus_spec: Focus | None = None
        self._views: OrderedDict[tuple[int, int, int], StepData] = OrderedDict()

    def compose(self) -> ComposeResult:
        yield Static(id="timeline-title")
        yield TimelineView(id="timeline")
        yield GapLegend(id="timeline-legend")
        yield Static(id="timeline-detail", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(TimelineView).focus()
        if self.focus_spec is None:
            self.focus_spec = self._default_focus()
        self._draw()

    def _default_focus(self) -> Focus | None:
        tk = self.tk
        pick = tk.trace.result.representative_step(tk.rank)
        return None if pick is None else Focus(tk.current[0], pick[0], pick[1])

    def show(self, focus: Focus | None) -> None:
        """Show ``focus`` (the representative step of the current rank when None)."""
        self.focus_spec = focus or self._default_focus()
        if self.is_mounted:
            self._draw()

    def selection_changed(self) -> None:
        self.show(None)

    def _step(self, focus: Focus) -> StepData:
        """The step's view, gaps and critical-path segments (cached for the last VIEW_CACHE steps)."""
        key = (focus.trace, focus.rank, focus.step)
        data = self._views.get(key)
        if data is None:
            data = build_step(self.tk.session.traces[focus.trace], focus)
        self._remember(focus, data)
        return data

    def _remember(self, focus: Focus, data: StepData) -> None:
        key = (focus.trace, focus.rank, focus.step)
        self._views[key] = data
        self._views.move_to_end(key)
        while len(self._views) > VIEW_CACHE:
            self._views.popitem(last=False)

    def _draw(self) -> None:
        focus = self.focus_spec
        title = self.query_one("#timeline-title", Static)
        if focus is None:
            title.update("no steps in this trace: nothing to draw")
            return
        trace = self.tk.session.traces[focus.trace]
        timeline = self.timeline
        setting = (timeline.depth_limit, timeline.show_path)
        cached = self._views.get((focus.trace, focus.rank, focus.step))
        if (cached is None or setting not in cached.lanes) and trace.tables.events.height >= ASYNC_EVENTS:
            # a big trace: build the step's view and lanes in a thread, keys keep answering meanwhile
            title.update(Text(f"building the view of rank {focus.rank} step {focus.step}…", "italic"))
            self._build(focus, *setting)
            return
        try:
            data = self._step(focus)
        except KeyError:
            title.update(f"no step {focus.step} on rank {focus.rank}")
            return
        self._apply(focus, data, data.lanes_for(*setting))

    @work(thread=True, exclusive=True, group="step-view", exit_on_error=False, description="build a step view")
    def _build(self, focus: Focus, depth_limit: int, show_path: bool) -> tuple[Focus, StepData, list[Lane]]:
        data = self._views.get((focus.trace, focus.rank, focus.step)) or build_step(self.tk.session.traces[focus.trace], focus)
        return focus, data, data.lanes_for(depth_limit, show_path)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group == "relayout":
            event.stop()
            if event.state == WorkerState.SUCCESS and event.worker.result is not None:
                data, lanes = event.worker.result
                if self.timeline.view is data.view:
                    self.timeline.replace_lanes(lanes)
            return
        if event.worker.group != "step-view":
            return
        event.stop()
        if event.state == WorkerState.SUCCESS and event.worker.result is not None:
            focus, data, lanes = event.worker.result
            self._remember(focus, data)
            if focus == self.focus_spec:
                self._apply(focus, data, lanes)
        elif event.state == WorkerState.ERROR and event.worker.error is not None:
            error = event.worker.error
            text = f"no step {self.focus_spec.step} here" if isinstance(error, KeyError) and self.focus_spec else str(error)
            self.query_one("#timeline-title", Static).update(text)

    def _apply(self, focus: Focus, data: StepData, lanes: list[Lane] | None) -> None:
        span = None if focus.start_ns is None or focus.end_ns is None else (focus.start_ns, focus.end_ns)
        timeline = self.timeline
        timeline.show(
            data.view, data.gaps, data.critical, span=span, event_id=focus.event_id, gap_id=focus.gap_id, lanes=lanes
        )
        self._update_title()
        if focus.event_id is not None and focus.gap_id is None:
            sel = timeline.selected()
            if sel is None or sel[0].ids[sel[1]] != focus.event_id:
                self.notify("that event is among the shortest of a busy step and is not drawn", timeout=3)

    def _update_title(self) -> None:
        focus = self.focus_spec
        if focus is None:
            return
        trace = self.tk.session.traces[focus.trace]
        d = trace.diagnosis
        row = d.steps.filter((pl.col("rank") == focus.rank) & (pl.col("step") == focus.step))
        steps = d.steps.filter(pl.col("rank") == focus.rank)["step"].to_list()
        timeline = self.query_one(TimelineView)
        text = Text()
        text.append(f"{trace.name} · rank {focus.rank} · step {focus.step}", "bold")
        text.append(f" ({steps.index(focus.step) + 1} of {len(steps)})" if focus.step in steps else "")
        if row.height:
            r = row.row(0, named=True)
            text.append(f" · {fmt_ns(r['dur_ns'])}")
            if r.get("utilization") is not None:
                text.append(f" · GPU busy {100 * r['utilization']:.1f}%")
            if not r["complete"]:
                text.append(" · partial window", "italic")
        view = timeline.view
        if view is not None:
            text.append(f" · {view.events.height:,} events")
            if view.dropped_events:
                text.append(f" ({view.dropped_events:,} shortest not drawn)", "italic")
        data = self._views.get((focus.trace, focus.rank, focus.step))
        if data is not None and data.critical is None:
            text.append(" · no critical path", "dim")
        self.query_one("#timeline-title", Static).update(text)

    # ----------------------------------------------------------- details
    def on_timeline_view_selected(self, event: TimelineView.Selected) -> None:
        self.query_one("#timeline-detail", Static).update(self._details(event.lane, event.entry))

    def _details(self, lane: Lane, entry: int) -> Text:
        focus = self.focus_spec
        assert focus is not None
        trace = self.tk.session.traces[focus.trace]
        ident = lane.ids[entry]
        start, end = lane.starts[entry], lane.ends[entry]
        text = Text()
        if lane.kind == "idle":
            data = self._views.get((focus.trace, focus.rank, focus.step))
            gaps = data.gaps if data is not None else trace.diagnosis.timeline.gaps
            gap = gaps.filter(pl.col("gap_id") == ident)
            if gap.height == 0:
                return text
            g = gap.row(0, named=True)
            text.append(f"Idle gap on GPU {g['device']}", "bold")
            text.append(f" · {cause_label(g['cause'])} · {fmt_ns(g['dur_ns'])} at +{fmt_ns(start)}\n")
            parts = [f"{c} {fmt_ns(g[f'{c}_ns'])}" for c in IDLE_CAUSES if g.get(f"{c}_ns")]
            text.append("made of: " + (", ".join(parts) or "—") + "\n")
            if g.get("host_tid") is not None:
                text.append(f"host thread {g['host_pid']}/{g['host_tid']}\n")
            for label, key in (("next GPU work", "next_event_id"), ("launched by", "launch_event_id"), ("after sync", "sync_event_id")):
                if g.get(key) is not None:
                    r = event_row(trace.tables, int(g[key]))
                    if r is not None:
                        text.append(f"{label}: {r['name']} ({r['kind']}, {fmt_ns(r['dur_ns'])})\n")
            text.append("f: jump to the call that ended the gap", "dim")
            return text
        if lane.kind == "path":
            data = self._views.get((focus.trace, focus.rank, focus.step))
            seg = None if data is None else data.critical
            text.append("Critical path segment", "bold")
            text.append(f" · {lane.names[entry]} · {fmt_ns(end - start)} at +{fmt_ns(start)}\n")
            if seg is not None:
                hit = seg.filter(pl.col("start_ns") == start + self.query_one(TimelineView).origin)
                if hit.height:
                    r = hit.row(0, named=True)
                    text.append(", ".join(f"{k}: {v}" for k, v in r.items() if k in ("track", "edge_kind", "cause", "inferred")) + "\n")
            if ident >= 0:
                r2 = event_row(trace.tables, ident)
                if r2 is not None:
                    text.append(f"event: {r2['name']} ({r2['kind']})")
            return text
        row = event_row(trace.tables, ident)
        if row is None:
            return text
        if lane.kind == "syncs":
            s = trace.diagnosis.syncs.filter(pl.col("event_id") == ident)
            text.append("Sync point", "bold")
            if s.height:
                r = s.row(0, named=True)
                text.append(f" · {r['api']} · {r['sync_kind']} · blocked {fmt_ns(r['dur_ns'])} at +{fmt_ns(start)}\n")
                text.append(f"operator: {r['op'] or '—'} · python: {r['python_frame'] or '—'} · "
                            f"{'recorded' if r['explicit'] else 'inferred from the operator'}\n")
            text.append("f: jump to the call on its thread", "dim")
            return text
        text.append(str(row["name"]), "bold")
        text.append(f" · {row['kind']} · {fmt_ns(row['dur_ns'])} at +{fmt_ns(start)} · {lane.label.strip()}\n")
        timeline = self.query_one(TimelineView)
        if ident in timeline._critical_ids:
            text.append("on the critical path\n", "bold")
        args = event_args(row)
        if args:
            text.append(" · ".join(f"{k}={v}" for k, v in args) + "\n")
        links = linked_events(trace.tables, ident)
        for link in links[:3]:
            text.append(f"{link['direction']}: {link['name']} ({link['kind']}, {fmt_ns(link['dur_ns'])})\n")
        if len(links) > 3:
            text.append(f"… and {len(links) - 3} more linked events\n")
        if links:
            text.append("f: follow the link", "dim")
        return text

    # ----------------------------------------------------------- actions
    @property
    def timeline(self) -> TimelineView:
        return self.query_one(TimelineView)

    def action_zoom(self, factor: float) -> None:
        self.timeline.zoom(factor)

    def action_fit(self) -> None:
        self.timeline.fit()

    def action_pan(self, fraction: float) -> None:
        self.timeline.pan(fraction)

    def action_select_event(self, delta: int) -> None:
        self.timeline.select_event(delta)

    def action_select_row(self, delta: int) -> None:
        self.timeline.select_lane(delta)

    def action_next_gap(self, direction: int) -> None:
        if not self.timeline.next_gap(direction):
            self.notify("no more idle gaps in this direction in this step", timeout=2)

    def action_cycle_depth(self) -> None:
        depth = self.timeline.cycle_depth(rebuild=False)
        self._relayout()
        self.notify(f"showing {depth} nesting level{'s' if depth > 1 else ''} per thread", timeout=2)

    def action_toggle_path(self) -> None:
        shown = self.timeline.toggle_path(rebuild=False)
        self._relayout()
        self.notify("critical path shown" if shown else "critical path hidden", timeout=2)

    def _relayout(self) -> None:
        """New lanes for the drawn step after a display setting changed (in a worker on big traces)."""
        focus = self.focus_spec
        timeline = self.timeline
        data = None if focus is None else self._views.get((focus.trace, focus.rank, focus.step))
        if focus is None or data is None:
            return
        setting = (timeline.depth_limit, timeline.show_path)
        if setting in data.lanes or self.tk.session.traces[focus.trace].tables.events.height < ASYNC_EVENTS:
            timeline.replace_lanes(data.lanes_for(*setting))
        else:
            self._relayout_worker(data, *setting)

    @work(thread=True, exclusive=True, group="relayout", exit_on_error=False, description="rebuild the lanes")
    def _relayout_worker(self, data: StepData, depth_limit: int, show_path: bool) -> tuple[StepData, list[Lane]]:
        return data, data.lanes_for(depth_limit, show_path)

    def action_follow(self) -> None:
        """Jump along a link: launch call ↔ GPU work, gap → the call that ended it, sync → its call."""
        sel = self.timeline.selected()
        focus = self.focus_spec
        if sel is None or focus is None:
            return
        lane, entry = sel
        trace = self.tk.session.traces[focus.trace]
        ident = lane.ids[entry]
        target: int | None = None
        if lane.kind == "idle":
            g = trace.diagnosis.timeline.gaps.filter(pl.col("gap_id") == ident)
            if g.height:
                r = g.row(0, named=True)
                target = r.get("launch_event_id") or r.get("next_event_id")
        elif lane.kind in ("syncs", "path"):
            target = ident if ident >= 0 else None
        else:
            links = linked_events(trace.tables, ident)
            target = int(links[0]["event_id"]) if links else None
        if target is None:
            self.notify("nothing linked to follow", timeout=2)
            return
        if not self.timeline.select_id("track", int(target)):
            self._jump_to_event(int(target))

    def _jump_to_event(self, event_id: int) -> None:
        """Open the step holding ``event_id`` (a kernel can run after its launch's step ends)."""
        focus = self.focus_spec
        assert focus is not None
        trace = self.tk.session.traces[focus.trace]
        row = event_row(trace.tables, event_id)
        if row is None:
            return
        from ..model import step_of

        rank = int(row["rank"])
        step = step_of(trace.diagnosis, rank, int(row["start_ns"]))
        if step is None:
            self.notify(f"{row['name']} runs outside every step", timeout=3)
            return
        self.show(Focus(focus.trace, rank, step, int(row["start_ns"]), int(row["end_ns"]), event_id=event_id))

    def _steps(self) -> list[int]:
        focus = self.focus_spec
        if focus is None:
            return []
        d = self.tk.session.traces[focus.trace].diagnosis
        return [int(s) for s in d.steps.filter(pl.col("rank") == focus.rank).sort("step")["step"].to_list()]

    def action_step(self, delta: int) -> None:
        focus = self.focus_spec
        steps = self._steps()
        if focus is None or not steps:
            return
        i = steps.index(focus.step) if focus.step in steps else 0
        j = max(0, min(i + delta, len(steps) - 1))
        if j != i:
            self.show(Focus(focus.trace, focus.rank, steps[j]))

    def action_pick_step(self) -> None:
        steps = self._steps()
        hint = f"steps {steps[0]}–{steps[-1]}" if steps else "no steps"
        self.app.push_screen(StepPicker(hint), self._picked)

    def _picked(self, value: str | None) -> None:
        focus = self.focus_spec
        if value is None or focus is None:
            return
        rank, _, step_text = value.rpartition(":")
        try:
            step = int(step_text)
            new_rank = int(rank) if rank else focus.rank
        except ValueError:
            self.notify(f"not a step number: {value!r}", severity="error", timeout=3)
            return
        choice = self.tk.choice_for_rank(new_rank, prefer=focus.trace)
        if choice is None:
            self.notify(f"no rank {new_rank} in this input", severity="error", timeout=3)
            return
        d = self.tk.session.traces[choice[0]].diagnosis
        if d.steps.filter((pl.col("rank") == new_rank) & (pl.col("step") == step)).height == 0:
            self.notify(f"no step {step} on rank {new_rank}", severity="error", timeout=3)
            return
        self.show(Focus(choice[0], new_rank, step))


__all__ = ["StepPicker", "TimelineScreen"]
