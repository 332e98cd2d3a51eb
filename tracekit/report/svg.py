"""Static SVG pictures of a diagnosis, drawn by tracekit itself (no plotting library, no script).

Three pictures, each a self-contained ``<svg>`` element for the HTML report:

* :func:`breakdown_svg` — one bar for the typical step, split by cause (``Diagnosis.breakdown``);
* :func:`steps_svg` — one column per step, split by cause, with the GPU utilization of each step
  as a line (``Diagnosis.timeline.per_step`` and ``Diagnosis.steps``);
* :func:`timeline_svg` — one step (a :class:`~tracekit.analysis.view.StepView`): CPU threads
  and GPU streams as lanes, each device's idle gaps coloured by cause, sync points marked and
  the critical path (when the diagnosis has one) drawn over the events.

Everything here only places what the analyses measured: coordinates, colours and labels.
Output is deterministic (fixed float formatting, explicit sort orders), so pictures can be
golden-tested.  Hover text uses SVG ``<title>`` elements, which need no script.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from xml.sax.saxutils import escape

import polars as pl

from ..analysis.causes import CAUSE_COLORS, CAUSE_LABELS, CAUSES, INK, cause_color, cause_label, cause_text_color
from ..analysis.job_replay import lanes_step
from ..analysis.view import StepView

#: event fill colours in the timeline, by event kind (muted, so idle gaps stand out)
KIND_COLORS: dict[str, str] = {
    "annotation": "#cfc8e6",
    "cpu_op": "#a9c6e3",
    "python": "#cfe5bd",
    "runtime": "#f3d9a6",
    "driver": "#f3d9a6",
    "sync": "#e45756",
    "os_call": "#dcdcdc",
    "kernel": "#4c78a8",
    "memcpy": "#9e7bb5",
    "memset": "#c2a5cf",
    "gpu_annotation": "#e3e3e3",
}
KIND_LABELS: dict[str, str] = {
    "annotation": "range / annotation",
    "cpu_op": "operator",
    "python": "Python frame",
    "runtime": "runtime / driver call",
    "kernel": "kernel",
    "memcpy": "copy",
    "memset": "memset",
}

SYNC_COLOR = "#c1121f"
CRITICAL_COLOR = "#d6006f"
MUTED = "#666666"
GRID = "#e6e6e6"
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"

#: drawing constants of the timeline
LABEL_W = 190
ROW_H = 11
GPU_ROW_H = 16
IDLE_ROW_H = 14
TRACK_GAP = 6
MAX_DEPTH = 8


def _f(x: float) -> str:
    """Fixed, short float formatting (one decimal, no trailing zero)."""
    text = f"{x:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _esc(text: object) -> str:
    return escape(str(text), {'"': "&quot;"})


def fmt_ms(ms: float) -> str:
    if ms >= 100:
        return f"{ms:,.1f} ms"
    if ms >= 1:
        return f"{ms:,.2f} ms"
    return f"{ms * 1000:,.1f} µs"


def _truncate(text: str, chars: int) -> str:
    if chars <= 1:
        return ""
    return text if len(text) <= chars else text[: chars - 1] + "…"


def nice_ticks(span: float, target: int = 8) -> float:
    """A tick interval of the form {1, 2, 5}·10^k giving about ``target`` ticks over ``span``."""
    if span <= 0:
        return 1.0
    raw = span / target
    power = 10 ** math.floor(math.log10(raw))
    for mult in (1, 2, 5, 10):
        if raw <= mult * power:
            return float(mult * power)
    return float(10 * power)


class Svg:
    """A tiny SVG writer: elements are appended as strings, in drawing order."""

    def __init__(self, width: float, height: float, *, label: str) -> None:
        self.width = width
        self.height = height
        self.label = label
        self.parts: list[str] = []

    def rect(self, x: float, y: float, w: float, h: float, fill: str, *, title: str | None = None, **attrs: Any) -> None:
        extra = "".join(f' {k.replace("_", "-")}="{_esc(v)}"' for k, v in attrs.items())
        body = f'<rect x="{_f(x)}" y="{_f(y)}" width="{_f(max(w, 0.0))}" height="{_f(h)}" fill="{fill}"{extra}'
        self.parts.append(f"{body}><title>{_esc(title)}</title></rect>" if title else body + "/>")

    def line(self, x1: float, y1: float, x2: float, y2: float, stroke: str, *, width: float = 1.0, title: str | None = None,
             **attrs: Any) -> None:
        extra = "".join(f' {k.replace("_", "-")}="{_esc(v)}"' for k, v in attrs.items())
        body = (f'<line x1="{_f(x1)}" y1="{_f(y1)}" x2="{_f(x2)}" y2="{_f(y2)}" stroke="{stroke}" '
                f'stroke-width="{_f(width)}"{extra}')
        self.parts.append(f"{body}><title>{_esc(title)}</title></line>" if title else body + "/>")

    def polyline(self, points: Sequence[tuple[float, float]], stroke: str, *, width: float = 1.5, **attrs: Any) -> None:
        if len(points) < 2:
            return
        extra = "".join(f' {k.replace("_", "-")}="{_esc(v)}"' for k, v in attrs.items())
        pts = " ".join(f"{_f(x)},{_f(y)}" for x, y in points)
        self.parts.append(f'<polyline points="{pts}" fill="none" stroke="{stroke}" stroke-width="{_f(width)}"{extra}/>')

    def circle(self, x: float, y: float, r: float, fill: str, *, title: str | None = None) -> None:
        body = f'<circle cx="{_f(x)}" cy="{_f(y)}" r="{_f(r)}" fill="{fill}"'
        self.parts.append(f"{body}><title>{_esc(title)}</title></circle>" if title else body + "/>")

    def polygon(self, points: Sequence[tuple[float, float]], fill: str, *, title: str | None = None) -> None:
        pts = " ".join(f"{_f(x)},{_f(y)}" for x, y in points)
        body = f'<polygon points="{pts}" fill="{fill}"'
        self.parts.append(f"{body}><title>{_esc(title)}</title></polygon>" if title else body + "/>")

    def text(self, x: float, y: float, text: str, *, size: float = 11, fill: str = INK, anchor: str = "start",
             weight: str | None = None, title: str | None = None) -> None:
        w = f' font-weight="{weight}"' if weight else ""
        a = "" if anchor == "start" else f' text-anchor="{anchor}"'
        inner = _esc(text) + (f"<title>{_esc(title)}</title>" if title else "")
        self.parts.append(f'<text x="{_f(x)}" y="{_f(y)}" font-size="{_f(size)}" fill="{fill}"{a}{w}>{inner}</text>')

    def raw(self, markup: str) -> None:
        self.parts.append(markup)

    def render(self) -> str:
        head = (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{_f(self.width)}" height="{_f(self.height)}" '
            f'viewBox="0 0 {_f(self.width)} {_f(self.height)}" role="img" aria-label="{_esc(self.label)}" '
            f'font-family="{_esc(FONT)}">'
        )
        return "\n".join([head, '<rect width="100%" height="100%" fill="#ffffff"/>', *self.parts, "</svg>"])


def _legend(svg: Svg, x: float, y: float, items: Iterable[tuple[str, str]], *, max_x: float,
            swatch: str = "rect") -> float:
    """Swatches with labels, wrapped at ``max_x``; returns the y below the legend."""
    cx, cy = x, y
    for color, label in items:
        w = 18 + 6.4 * len(label) + 14
        if cx + w > max_x and cx > x:
            cx, cy = x, cy + 18
        if swatch == "line":
            svg.line(cx, cy - 4, cx + 12, cy - 4, color, width=3)
        else:
            svg.rect(cx, cy - 10, 12, 12, color, rx=2)
        svg.text(cx + 17, cy, label, size=11, fill=INK)
        cx += w
    return cy + 12


# --------------------------------------------------------------------------- breakdown


def breakdown_svg(breakdown: Mapping[str, float], breakdown_ms: Mapping[str, float], *, width: float = 1180) -> str:
    """One horizontal bar for the typical step, split into causes (share of step time)."""
    causes = [c for c in CAUSES if breakdown.get(c, 0.0) > 0]
    bar_y, bar_h = 10.0, 34.0
    svg = Svg(width, 0, label="Where the step time goes")
    total_ms = sum(breakdown_ms.get(c, 0.0) for c in CAUSES)
    x = 0.0
    for cause in causes:
        share = breakdown.get(cause, 0.0)
        w = share * width
        ms = breakdown_ms.get(cause, 0.0)
        svg.rect(x, bar_y, w, bar_h, CAUSE_COLORS[cause], title=f"{CAUSE_LABELS[cause]}: {fmt_ms(ms)} per step ({100 * share:.1f}%)")
        label = f"{CAUSE_LABELS[cause]} {100 * share:.0f}%"
        if w > 7 * len(label) + 8:
            fill = cause_text_color(cause)
            svg.text(x + 6, bar_y + 22, label, size=12, fill=fill, weight="600")
        x += w
    items = [(CAUSE_COLORS[c], f"{CAUSE_LABELS[c]} {fmt_ms(breakdown_ms.get(c, 0.0))} ({100 * breakdown.get(c, 0.0):.1f}%)")
             for c in causes]
    bottom = _legend(svg, 0, bar_y + bar_h + 22, items, max_x=width)
    svg.text(width, bar_y + bar_h + 22 + (bottom - (bar_y + bar_h + 34)) + 18, f"mean step {fmt_ms(total_ms)}", size=11,
             fill=MUTED, anchor="end")
    svg.height = bottom + 18
    return svg.render()


# --------------------------------------------------------------------------- steps


def steps_svg(per_step: pl.DataFrame, utilization: Mapping[int, float | None], *, width: float = 1180,
              height: float = 260) -> str:
    """Columns per step (ms, stacked by cause) and GPU utilization per step (line, right axis).

    ``per_step`` holds one device's rows of ``Timeline.per_step`` plus a ``complete`` column;
    ``utilization`` maps step → busy share (``Diagnosis.steps``).
    """
    left, right, top, bottom = 56.0, 48.0, 14.0, 40.0
    plot_w, plot_h = width - left - right, height - top - bottom
    svg = Svg(width, height, label="Step time and GPU utilization per step")
    rows = per_step.sort("step").to_dicts()
    if not rows:
        svg.text(left, top + 20, "no steps", fill=MUTED)
        return svg.render()
    max_ms = max(float(r["dur_ns"]) / 1e6 for r in rows) or 1.0
    tick = nice_ticks(max_ms, 5)
    y_max = math.ceil(max_ms / tick) * tick
    for i in range(round(y_max / tick) + 1):
        v = i * tick
        y = top + plot_h - v / y_max * plot_h
        svg.line(left, y, left + plot_w, y, GRID)
        svg.text(left - 6, y + 4, f"{v:g}", size=10, fill=MUTED, anchor="end")
    for pct in (0, 50, 100):
        y = top + plot_h - pct / 100 * plot_h
        svg.text(left + plot_w + 6, y + 4, f"{pct}%", size=10, fill=MUTED)
    svg.text(12, top + plot_h / 2, "ms", size=10, fill=MUTED)
    slot = plot_w / len(rows)
    col_w = max(1.0, min(48.0, slot * 0.7))
    label_every = max(1, math.ceil(len(rows) / 30))
    points: list[tuple[float, float]] = []
    for i, r in enumerate(rows):
        cx = left + slot * (i + 0.5)
        y = top + plot_h
        dur_ms = float(r["dur_ns"]) / 1e6
        complete = bool(r.get("complete", True))
        opacity = "1" if complete else "0.45"
        parts = []
        for cause in CAUSES:
            ms = float(r.get(f"{cause}_ns") or 0) / 1e6
            if ms <= 0:
                continue
            h = ms / y_max * plot_h
            y -= h
            parts.append(f"{CAUSE_LABELS[cause]} {fmt_ms(ms)}")
            svg.rect(cx - col_w / 2, y, col_w, h, CAUSE_COLORS[cause], opacity=opacity)
        util = utilization.get(int(r["step"]))
        tip = f"step {r['step']}{'' if complete else ' (partial window)'}: {fmt_ms(dur_ms)}"
        if util is not None:
            tip += f", GPU busy {100 * util:.1f}%"
        tip += " — " + ", ".join(parts)
        svg.rect(cx - slot / 2, top, slot, plot_h, "#000000", opacity="0", title=tip)
        if util is not None:
            points.append((cx, top + plot_h - util * plot_h))
        if i % label_every == 0:
            svg.text(cx, top + plot_h + 14, str(r["step"]), size=10, fill=MUTED, anchor="middle")
    svg.polyline(points, INK, width=1.5)
    for x, y in points:
        svg.circle(x, y, 2.5, INK)
    svg.text(left + plot_w / 2, height - 6, "step (pale: partial window, not in medians)", size=10, fill=MUTED, anchor="middle")
    svg.line(left, height - 12, left + 14, height - 12, INK, width=1.5)
    svg.text(left + 18, height - 8, "GPU utilization (right axis)", size=10, fill=MUTED)
    return svg.render()


# --------------------------------------------------------------------------- timeline


def timeline_svg(view: StepView, *, critical_path: Any = None, width: float = 1180) -> str:
    """The picture of one step: lanes per CPU thread and GPU stream, idle gaps by cause,
    sync points and the critical path.

    ``critical_path`` is ``Diagnosis.critical_path`` (an object with a ``segments`` frame) or
    None; a caption says so when it is None.
    """
    plot_x = float(LABEL_W)
    plot_w = width - plot_x - 16
    span = max(view.end_ns - view.start_ns, 1)

    def x_of(t: int | float) -> float:
        return plot_x + (float(t) - view.start_ns) / span * plot_w

    events = view.events.sort(["track", "start_ns", "depth", "end_ns", "event_id"])
    depth_by_track = {t: int(d) for t, d in events.group_by("track").agg(pl.col("depth").max()).iter_rows()}
    tracks = view.tracks.sort("order").to_dicts()
    gap_devices = sorted({int(d) for d in view.gaps["device"].drop_nulls().to_list()}) if view.gaps.height else []

    # lay out the lanes: CPU threads, then per device its streams followed by its idle lane
    axis_h = 30.0
    y = axis_h + 4
    lanes: list[tuple[str, str, float, float, str]] = []  # (key, label, y, height, kind)
    track_y: dict[str, tuple[float, float]] = {}
    gpu_tracks: dict[int, list[dict[str, Any]]] = {}
    for t in tracks:
        if t["side"] == "gpu":
            device = _device_of(t["track"])
            gpu_tracks.setdefault(device, []).append(t)
            continue
        h = ROW_H * min(depth_by_track.get(t["track"], 0) + 1, MAX_DEPTH)
        lanes.append((t["track"], t["label"], y, h, "cpu"))
        track_y[t["track"]] = (y, h)
        y += h + TRACK_GAP
    device_rows: dict[int, tuple[float, float]] = {}
    for device in sorted(set(gpu_tracks) | set(gap_devices)):
        first = y
        for t in gpu_tracks.get(device, []):
            lanes.append((t["track"], t["label"], y, GPU_ROW_H, "gpu"))
            track_y[t["track"]] = (y, GPU_ROW_H)
            y += GPU_ROW_H + 3
        device_rows[device] = (first, y - first)
        lanes.append((f"idle {device}", f"GPU {device} idle, by cause", y, IDLE_ROW_H, "idle"))
        track_y[f"idle {device}"] = (y, IDLE_ROW_H)
        y += IDLE_ROW_H + TRACK_GAP
    plot_bottom = y
    svg = Svg(width, 0, label=f"Timeline of step {view.step} on rank {view.rank}")

    # axis and grid
    span_ms = span / 1e6
    tick = nice_ticks(span_ms, 10)
    n_ticks = int(span_ms / tick + 1e-9)
    for i in range(n_ticks + 1):
        x = plot_x + i * tick / span_ms * plot_w
        svg.line(x, axis_h - 4, x, plot_bottom, GRID)
        svg.text(x, axis_h - 8, f"{i * tick:g}", size=10, fill=MUTED, anchor="middle")
    svg.text(8, axis_h - 8, "ms from step start", size=10, fill=MUTED)

    # lane backgrounds and labels
    for _key, label, ly, lh, kind in lanes:
        bg = {"cpu": "#f7f7f9", "gpu": "#f2f5fa", "idle": "#fbfbfb"}[kind]
        svg.rect(plot_x, ly, plot_w, lh, bg)
        svg.text(8, ly + min(lh, 14) - 3, _truncate(label, 28), size=10.5, fill=INK if kind != "idle" else MUTED, title=label)

    # idle gaps: on the idle lane, and a pale band over the device's streams
    for g in view.gaps.sort(["device", "start_ns", "end_ns"]).iter_rows(named=True):
        device = int(g["device"])
        x0, x1 = x_of(max(g["start_ns"], view.start_ns)), x_of(min(g["end_ns"], view.end_ns))
        color = cause_color(str(g["cause"]))
        dur_ms = (g["end_ns"] - g["start_ns"]) / 1e6
        tip = (f"GPU {device} idle {fmt_ms(dur_ms)}: {cause_label(str(g['cause']))} "
               f"(at {(g['start_ns'] - view.start_ns) / 1e6:,.3f} ms)")
        iy, ih = track_y[f"idle {device}"]
        svg.rect(x0, iy, max(x1 - x0, 0.8), ih, color, title=tip)
        dy, dh = device_rows.get(device, (iy, 0.0))
        if dh > 0:
            svg.rect(x0, dy, max(x1 - x0, 0.8), dh, color, opacity="0.22")

    # events
    hidden = 0
    for e in events.iter_rows(named=True):
        ty = track_y.get(e["track"])
        if ty is None:
            continue
        depth = int(e["depth"])
        if not str(e["track"]).startswith("gpu") and depth >= MAX_DEPTH:
            hidden += 1
            continue
        kind = str(e["kind"])
        x0, x1 = x_of(max(e["start_ns"], view.start_ns)), x_of(min(e["end_ns"], view.end_ns))
        w = max(x1 - x0, 0.6)
        if str(e["track"]).startswith("gpu"):
            ey, eh = ty[0] + 1, GPU_ROW_H - 2
        else:
            ey, eh = ty[0] + depth * ROW_H, ROW_H - 1
        dur_ms = (e["end_ns"] - e["start_ns"]) / 1e6
        svg.rect(x0, ey, w, eh, KIND_COLORS.get(kind, "#cccccc"), title=f"{e['name']} · {kind} · {fmt_ms(dur_ms)}")
        chars = int((w - 4) / 5.6)
        if chars >= 4:
            fill = "#ffffff" if kind in ("kernel", "memcpy", "sync") else INK
            svg.text(x0 + 2, ey + eh - 2.5, _truncate(str(e["name"]), chars), size=9, fill=fill)

    # sync points: the blocked call on its thread (at its nesting depth), and a marker across the picture
    depth_of = dict(zip(view.events["event_id"].to_list(), view.events["depth"].to_list(), strict=True))
    for s in view.syncs.sort(["start_ns", "tid"]).iter_rows(named=True):
        track = f"cpu {s['pid']}/{s['tid']}"
        x0 = x_of(s["start_ns"])
        x1 = x_of(s["start_ns"] + (s["dur_ns"] or 0))
        where = f" in {s['op']}" if s.get("op") else ""
        frame = f" ({s['python_frame']})" if s.get("python_frame") else ""
        tip = f"sync: {s['api']}{where}{frame}, blocked {fmt_ms((s['dur_ns'] or 0) / 1e6)}"
        svg.line(x0, axis_h, x0, plot_bottom, SYNC_COLOR, width=1, stroke_dasharray="3 3", opacity="0.8")
        svg.polygon([(x0 - 5, axis_h - 2), (x0 + 5, axis_h - 2), (x0, axis_h + 6)], SYNC_COLOR, title=tip)
        ty = track_y.get(track)
        if ty is not None:
            row = min(int(depth_of.get(s["event_id"], 0)), MAX_DEPTH - 1)
            svg.rect(x0, ty[0] + row * ROW_H, max(x1 - x0, 1.5), ROW_H - 1, "none", stroke=SYNC_COLOR, stroke_width="1.5",
                     title=tip)

    # critical path
    caption: list[str] = []
    segments = getattr(critical_path, "segments", None) if critical_path is not None else None
    if critical_path is None or segments is None:
        caption.append("critical path not computed")
    else:
        seg = segments.filter((pl.col("rank") == view.rank) & (pl.col("step") == view.step)).sort("seq")
        if seg.height == 0:
            caption.append("critical path: no segments in this step")
        else:
            prev: tuple[float, float] | None = None
            drawn = 0
            for s in seg.iter_rows(named=True):
                ty = track_y.get(str(s["track"])) if s["track"] is not None else None
                x0 = x_of(max(s["start_ns"], view.start_ns))
                x1 = x_of(min(s["end_ns"], view.end_ns))
                if ty is None:
                    continue
                cy = ty[0] + 1.5
                dash = {"stroke_dasharray": "4 2"} if s.get("inferred") else {}
                tip = (f"critical path #{s['seq']}: {s.get('edge_kind') or ''} {s.get('cause') or ''} "
                       f"{fmt_ms((s['end_ns'] - s['start_ns']) / 1e6)}").replace("  ", " ")
                if prev is not None:
                    svg.line(prev[0], prev[1], x0, cy, CRITICAL_COLOR, width=1, opacity="0.7")
                svg.line(x0, cy, max(x1, x0 + 1), cy, CRITICAL_COLOR, width=3.5, title=tip, **dash)
                prev = (max(x1, x0 + 1), cy)
                drawn += 1
            caption.append(f"critical path: {drawn} segments highlighted")
    if hidden:
        caption.append(f"{hidden} events nested deeper than {MAX_DEPTH} levels not drawn")
    if view.dropped_events:
        caption.append(f"{view.dropped_events:,} shortest events left out")

    # legend
    ly = plot_bottom + 20
    present = {str(c) for c in view.gaps["cause"].to_list()} if view.gaps.height else set()
    gap_causes = sorted(present, key=lambda c: (CAUSES.index(c) if c in CAUSES else len(CAUSES), c))
    kinds = sorted({str(k) for k in view.events["kind"].to_list()}) if view.events.height else []
    seen: set[str] = set()
    kind_items = []
    for k in kinds:
        label = KIND_LABELS.get(k, k.replace("_", " "))
        if label in seen:
            continue
        seen.add(label)
        kind_items.append((KIND_COLORS.get(k, "#cccccc"), label))
    svg.text(8, ly, "events", size=10.5, fill=MUTED)
    ly = _legend(svg, plot_x, ly, kind_items, max_x=width) + 10
    if gap_causes:
        svg.text(8, ly, "idle gaps", size=10.5, fill=MUTED)
        ly = _legend(svg, plot_x, ly, [(cause_color(c), cause_label(c)) for c in gap_causes],
                     max_x=width) + 10
    svg.text(8, ly, "marks", size=10.5, fill=MUTED)
    marks = [(SYNC_COLOR, f"sync point ({view.syncs.height})")]
    if segments is not None:
        marks.append((CRITICAL_COLOR, "critical path"))
    ly = _legend(svg, plot_x, ly, marks, max_x=width, swatch="line") + 6
    if caption:
        svg.text(plot_x, ly + 8, " · ".join(caption), size=10.5, fill=MUTED)
        ly += 14
    svg.height = ly + 8
    return svg.render()


#: rank lanes: the rank's work between collectives, its collectives, the waits inside them
LANE_WORK = "#d9d9d9"
LANE_COMM = "#4c78a8"
LANE_WAIT = "#a9c6e3"


def rank_lanes_svg(lanes: pl.DataFrame, step: int, *, width: float = 1180) -> str:
    """One lane per rank for one step of a job on the aligned clock: each rank's work between
    collectives (grey; magenta when the cross-rank critical path runs through it), its
    collectives (dark: the transfer; light: waiting for the last rank), a line joining the ends
    of one collective across its ranks."""
    rows = lanes.filter(pl.col("step") == step).sort("j", "rank")
    ranks = sorted(int(r) for r in rows["rank"].unique().to_list())
    lane_h, gap, top, label_w = 18, 8, 26, 90
    height = top + len(ranks) * (lane_h + gap) + 56
    svg = Svg(width, height, label=f"rank lanes of step {step}")
    if rows.height == 0:
        return svg.render()
    t0 = int(rows["work_start_ns"].fill_null(rows["start_ns"]).min())  # type: ignore[arg-type]
    t1 = int(rows["end_ns"].max())  # type: ignore[arg-type]
    span = max(t1 - t0, 1)
    plot_w = width - label_w - 20

    def x(t: int) -> float:
        return label_w + (t - t0) / span * plot_w

    tick = nice_ticks(span / 1e6)
    k = 0
    while k * tick * 1e6 <= span:
        tx = x(t0 + int(k * tick * 1e6))
        svg.line(tx, top - 6, tx, height - 44, GRID)
        svg.text(tx, height - 30, fmt_ms(k * tick), size=10, fill=MUTED, anchor="middle")
        k += 1
    y_of = {r: top + i * (lane_h + gap) for i, r in enumerate(ranks)}
    for r in ranks:
        svg.text(8, y_of[r] + lane_h - 4, f"rank {r}", size=11, fill=INK)
    # the last arrival of each collective: everyone else waits for it inside the collective
    last_start = rows.group_by("j").agg(pl.col("start_ns").max().alias("_last"))
    rows = rows.join(last_start, on="j")
    for row in rows.iter_rows(named=True):
        y = y_of[int(row["rank"])]
        op = str(row["op"])
        if row["work_start_ns"] is not None and row["start_ns"] > row["work_start_ns"]:
            w_ms = (row["start_ns"] - row["work_start_ns"]) / 1e6
            fill = CRITICAL_COLOR if row["critical"] else LANE_WORK
            why = "on the cross-rank critical path: the others wait for it" if row["critical"] else "work before the collective"
            svg.rect(x(row["work_start_ns"]), y + 3, x(row["start_ns"]) - x(row["work_start_ns"]), lane_h - 6, fill,
                     title=f"rank {row['rank']}: {fmt_ms(w_ms)} {why}")
        wait_end = min(max(int(row["_last"]), int(row["start_ns"])), int(row["end_ns"]))
        if wait_end > row["start_ns"]:
            svg.rect(x(row["start_ns"]), y, x(wait_end) - x(row["start_ns"]), lane_h, LANE_WAIT,
                     title=f"rank {row['rank']}: waits {fmt_ms((wait_end - row['start_ns']) / 1e6)} in {op} for the last rank")
        svg.rect(x(wait_end), y, x(row["end_ns"]) - x(wait_end), lane_h, LANE_COMM,
                 title=f"rank {row['rank']}: {op} #{row['j']} ({fmt_ms((row['end_ns'] - row['start_ns']) / 1e6)})")
    # one collective across its ranks
    for j, grp in rows.group_by("j", maintain_order=True):
        members = sorted(int(v) for v in grp["rank"].to_list())
        end = int(grp["end_ns"].median())  # type: ignore[arg-type]
        svg.line(x(end), y_of[members[0]], x(end), y_of[members[-1]] + lane_h, INK, width=1.0,
                 title=f"{grp['op'][0]} #{j[0]}: ranks {', '.join(str(m) for m in members)}", stroke_dasharray="3,2")
    _legend(svg, label_w, height - 8, [(LANE_WORK, "work between collectives"), (CRITICAL_COLOR, "cross-rank critical path"),
                                        (LANE_WAIT, "waiting for the last rank"), (LANE_COMM, "collective")], max_x=width)
    return svg.render()


def _device_of(track: str) -> int:
    """Device number of a ``gpu {device}/{stream}`` track."""
    try:
        return int(track.split(" ", 1)[1].split("/", 1)[0])
    except (IndexError, ValueError):
        return -1


__all__ = [
    "CAUSE_COLORS",
    "CAUSE_LABELS",
    "KIND_COLORS",
    "breakdown_svg",
    "lanes_step",
    "nice_ticks",
    "rank_lanes_svg",
    "steps_svg",
    "timeline_svg",
]


# --------------------------------------------------------------------------- roofline

#: one colour per operator class of the roofline chart
CLASS_COLORS: dict[str, str] = {"gemm": "#4c78a8", "conv": "#54a24b", "attention": "#e45756"}


def roofline_svg(
    points: pl.DataFrame, *, peak_tflops: float, memory_gbps: float, dtype: str, fp32_tflops: float | None = None,
    width: float = 1180, height: float = 340,
) -> str:
    """The roofline of one device (log-log) with one dot per operator shape.

    ``points`` holds ``name, op_class, shape, dtype, intensity, tflops, gpu_ns`` rows (the
    efficiency table's matrix operators); a dot's area follows its share of GPU time.  The roof
    is ``min(peak, intensity × bandwidth)`` for the dtype MFU is measured against, with the fp32
    roof dashed under it when that differs.
    """
    pts = points.filter(pl.col("intensity").is_not_null() & (pl.col("intensity") > 0) & pl.col("tflops").is_not_null()
                        & (pl.col("tflops") > 0)).sort(["gpu_ns", "name", "shape"], descending=[True, False, False])
    left, right, top, bottom = 64.0, 20.0, 16.0, 46.0
    pw, ph = width - left - right, height - top - bottom
    ridge = peak_tflops * 1e3 / memory_gbps
    xs = [ridge, *pts["intensity"].to_list()]
    ys = [peak_tflops, *pts["tflops"].to_list()]
    x_lo = 10 ** math.floor(math.log10(max(min(xs) / 2, 1e-3)))
    x_hi = 10 ** math.ceil(math.log10(max(xs) * 2))
    y_hi = 10 ** math.ceil(math.log10(peak_tflops * 1.05))
    y_lo = 10 ** math.floor(math.log10(max(min(ys) / 2, 1e-3)))

    def px(x: float) -> float:
        return left + (math.log10(x) - math.log10(x_lo)) / (math.log10(x_hi) - math.log10(x_lo)) * pw

    def py(y: float) -> float:
        return top + ph - (math.log10(y) - math.log10(y_lo)) / (math.log10(y_hi) - math.log10(y_lo)) * ph

    svg = Svg(width, height, label=f"Roofline ({dtype} peak {peak_tflops:g} TFLOP/s, {memory_gbps:g} GB/s)")
    e = int(math.log10(x_lo))
    while 10**e <= x_hi:
        x = px(10**e)
        svg.line(x, top, x, top + ph, GRID)
        svg.text(x, top + ph + 14, f"{10**e:g}", size=10, fill=MUTED, anchor="middle")
        e += 1
    e = int(math.log10(y_lo))
    while 10**e <= y_hi:
        y = py(10**e)
        svg.line(left, y, left + pw, y, GRID)
        svg.text(left - 6, y + 4, f"{10**e:g}", size=10, fill=MUTED, anchor="end")
        e += 1
    svg.text(left + pw / 2, height - 8, "arithmetic intensity (FLOPs per byte moved)", size=11, fill=MUTED, anchor="middle")
    svg.raw(f'<text x="0" y="0" font-size="11" fill="{MUTED}" text-anchor="middle" '
            f'transform="translate(16 {_f(top + ph / 2)}) rotate(-90)">TFLOP/s</text>')

    def roof(peak: float, color: str, dash: str | None, label: str) -> None:
        knee = peak * 1e3 / memory_gbps
        start = max(x_lo, y_lo * 1e3 / memory_gbps)
        line = [(px(start), py(start * memory_gbps / 1e3)), (px(knee), py(peak)), (px(x_hi), py(peak))]
        if dash:
            svg.polyline(line, color, width=1.5, stroke_dasharray=dash)
        else:
            svg.polyline(line, color, width=2.0)
        svg.text(left + pw - 4, py(peak) - 5, label, size=11, fill=color, anchor="end")

    if fp32_tflops and dtype != "fp32" and fp32_tflops < peak_tflops:
        roof(fp32_tflops, MUTED, "5,4", f"fp32 peak {fp32_tflops:g} TFLOP/s")
    roof(peak_tflops, INK, None, f"{dtype} peak {peak_tflops:g} TFLOP/s · {memory_gbps:,.0f} GB/s")
    total = float(pts["gpu_ns"].sum() or 0) or 1.0
    for row in pts.iter_rows(named=True):
        r = 3 + 12 * math.sqrt(row["gpu_ns"] / total)
        color = CLASS_COLORS.get(row["op_class"], "#999999")
        title = (f"{row['name']} {row['shape']} {row['dtype'] or '?'}: {row['tflops']:,.1f} TFLOP/s at "
                 f"{row['intensity']:,.1f} FLOP/B, {row['gpu_ns'] / 1e6:,.2f} ms")
        svg.raw(f'<circle cx="{_f(px(row["intensity"]))}" cy="{_f(py(row["tflops"]))}" r="{_f(r)}" fill="{color}" '
                f'fill-opacity="0.55" stroke="{color}"><title>{_esc(title)}</title></circle>')
    classes = [c for c in CLASS_COLORS if c in set(pts["op_class"].to_list())]
    _legend(svg, left + 8, top + 14, [(CLASS_COLORS[c], c) for c in classes], max_x=left + pw / 2)
    return svg.render()


# --------------------------------------------------------------------------- fix plan


def plan_svg(step_ms: float, steps: Sequence[tuple[str, float, str]], *, width: float = 1180) -> str:
    """The step time today and after each step of the fix plan, one bar each, on one scale
    (``steps``: the step's words, its predicted step in ms with the earlier steps applied,
    and its colour)."""
    rows = [("today", step_ms, MUTED), *steps]
    bar_h, gap, top = 22.0, 8.0, 4.0
    label_w = min(LABEL_W * 2.0, width / 2)
    scale = (width - label_w - 90) / step_ms if step_ms > 0 else 0.0
    svg = Svg(width, top + len(rows) * (bar_h + gap) + 4, label="Step time after each step of the fix plan")
    for i, (words, ms, color) in enumerate(rows):
        y = top + i * (bar_h + gap)
        svg.text(0, y + 15, _truncate(words if i == 0 else f"{i}. {words}", int(label_w / 6.6)), size=12, fill=INK, title=words)
        svg.rect(label_w, y, ms * scale, bar_h, color, title=f"{words}: {fmt_ms(ms)} per step")
        if i:
            # what the step saved, as a faint bar behind: where the previous step ended
            prev = rows[i - 1][1]
            svg.rect(label_w + ms * scale, y, max(prev - ms, 0.0) * scale, bar_h, GRID)
        svg.text(label_w + max(ms, rows[i - 1][1] if i else ms) * scale + 6, y + 15, fmt_ms(ms), size=12, fill=INK)
    return svg.render()
