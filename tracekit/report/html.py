"""The HTML report: one self-contained file with pictures, for people to open and share.

:func:`render_html` lays out what the analyses concluded — the step-time breakdown, step time
and GPU utilization per step, the timeline of a representative step (a
:class:`~tracekit.analysis.view.StepView` the caller builds), the findings with evidence and
fixes, sync points and the top kernels.  Pictures are inline SVG drawn by
:mod:`tracekit.report.svg`; the page has no script, loads nothing from the network (its
Content-Security-Policy forbids it) and opens offline.  Output is deterministic: no clock,
stable ordering, fixed number formatting.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from .._version import __version__
from ..analysis import CAUSES, Diagnosis
from ..analysis.findings import Finding
from ..analysis.view import StepView
from .json_report import JSON_SCHEMA_VERSION, to_json_dict
from .svg import CAUSE_COLORS, breakdown_svg, fmt_ms, steps_svg, timeline_svg
from .text import CAUSE_LABELS, _evidence_text, _headline

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

STYLE = """
:root { color-scheme: light; }
body { margin: 0; background: #f4f5f7; color: #222; font: 14px/1.5 system-ui, -apple-system, 'Segoe UI', Roboto,
  'Helvetica Neue', Arial, sans-serif; }
main { max-width: 1240px; margin: 0 auto; padding: 24px 20px 40px; }
header h1 { font-size: 22px; margin: 0 0 2px; }
header .path { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; color: #444; margin: 0;
  word-break: break-all; }
header .meta { color: #555; margin: 4px 0 0; }
section { background: #fff; border: 1px solid #e1e3e8; border-radius: 8px; padding: 14px 18px; margin: 16px 0; }
section h2 { font-size: 17px; margin: 0 0 10px; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; background: none; border: 0; padding: 0; }
.card { flex: 1 1 200px; background: #fff; border: 1px solid #e1e3e8; border-radius: 8px; padding: 10px 14px; }
.card .v { font-size: 24px; font-weight: 650; }
.card .k { color: #666; font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
.figure { overflow-x: auto; }
.figure svg { display: block; max-width: none; }
.caption { color: #555; font-size: 13px; margin: 6px 0 0; }
.finding { border-left: 5px solid #999; padding: 6px 12px; margin: 10px 0; background: #fafafa; }
.finding h3 { font-size: 15px; margin: 0 0 4px; }
.finding .cost { font-weight: 600; }
.finding .kind { font-family: ui-monospace, Menlo, Consolas, monospace; color: #666; font-weight: 400; font-size: 12px; }
.finding p { margin: 4px 0; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #eceef2; vertical-align: top; }
th { background: #f7f8fa; font-weight: 600; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px; }
td.kernel { word-break: break-all; }
dl.ev { margin: 4px 0 0; display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; font-size: 13px; }
dl.ev dt { color: #555; }
dl.ev dd { margin: 0; }
details summary { cursor: pointer; color: #335; }
.muted { color: #666; }
footer { color: #777; font-size: 12px; text-align: center; margin-top: 24px; }
"""


def _e(text: object) -> str:
    from html import escape

    return escape(str(text), quote=True)


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.2f} ms"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def render_html(d: Diagnosis, view: StepView | None = None) -> str:
    """The whole report as one HTML document (see the module docstring)."""
    data = to_json_dict(d)
    s = data["summary"]
    path = data["trace"]["path"]
    body: list[str] = []
    head_lines = _headline(d, data)
    body.append(
        f'<header><h1>tracekit diagnosis</h1><p class="path">{_e(path)}</p>'
        f'<p class="meta">{_e(head_lines[0])}</p></header>'
    )
    body.append(_cards(d, data))
    if s["breakdown"]:
        body.append(
            "<section><h2>Where the step time goes</h2>"
            f'<div class="figure">{breakdown_svg(d.breakdown, d.breakdown_ms)}</div>'
            '<p class="caption">Every nanosecond of a step is either GPU busy time (compute, or only communication / '
            "pageable copies running) or an idle gap charged to the cause the host was busy with; the parts add up "
            "to the step. Mean over complete steps of the busiest GPU.</p></section>"
        )
    body.append(_steps_section(d, view))
    body.append(_timeline_section(d, view))
    body.append(_findings_section(d, data))
    body.append(_syncs_section(data))
    body.append(_kernels_section(data))
    body.append(_memory_section(data))
    notes = [*data["data_quality"], *data["warnings"]]
    if notes:
        body.append("<section><h2>Notes</h2><ul>" + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul></section>")
    body.append(
        f"<footer>tracekit {_e(__version__)} · report schema {_e(JSON_SCHEMA_VERSION)} · "
        "self-contained page: no script, no network</footer>"
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta name="generator" content="tracekit {_e(__version__)}">\n'
        f"<title>tracekit · {_e(path)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<main>\n"
        + "\n".join(part for part in body if part)
        + "\n</main>\n</body>\n</html>\n"
    )


def _cards(d: Diagnosis, data: dict[str, Any]) -> str:
    s = data["summary"]
    top = d.findings[0] if d.findings else None
    cards = [
        ("step time (median)", _ms(s["step_ms_median"]), f"mean {_ms(s['step_ms_mean'])}"),
        ("GPU utilization", _pct(s["gpu_utilization"]), "busy share of step time"),
        ("steps", f"{s['complete_steps']}", f"complete, of {s['steps']} windows" + (f" · from {s['step_source']}" if s["step_source"] else "")),
        (
            "largest cost",
            _e(CAUSE_LABELS.get(top.kind, top.kind)) if top else "none",
            f"{top.ms_per_step:,.2f} ms per step ({100 * top.share_of_step:.1f}%)" if top else "nothing costs 5% or more",
        ),
    ]
    inner = "".join(
        f'<div class="card"><div class="k">{_e(k)}</div><div class="v">{v if k == "largest cost" else _e(v)}</div>'
        f'<div class="muted">{_e(sub)}</div></div>'
        for k, v, sub in cards
    )
    return f'<section class="cards">{inner}</section>'


def _steps_section(d: Diagnosis, view: StepView | None) -> str:
    if d.steps.height == 0 or d.timeline.per_step.height == 0:
        return ""
    rank = view.rank if view is not None else int(d.steps["rank"].min())  # type: ignore[arg-type]
    device = d.timeline.primary_device.get(rank)
    if device is None:
        return ""
    steps = d.steps.filter(pl.col("rank") == rank)
    per_step = d.timeline.per_step.filter((pl.col("rank") == rank) & (pl.col("device") == device)).join(
        steps.select("step", "complete"), on="step", how="left"
    )
    util = {int(r["step"]): r["utilization"] for r in steps.iter_rows(named=True)}
    rows = "".join(
        f'<tr><td class="n">{r["step"]}</td><td class="n">{r["dur_ns"] / 1e6:,.2f}</td>'
        f'<td class="n">{_pct(r["utilization"])}</td><td>{"yes" if r["complete"] else "no (partial window)"}</td></tr>'
        for r in steps.sort("step").iter_rows(named=True)
    )
    return (
        f"<section><h2>Step time and GPU utilization per step</h2>"
        f'<div class="figure">{steps_svg(per_step, util)}</div>'
        f'<p class="caption">Rank {rank}, GPU {device}: each column is one step, split by cause like the bar above; '
        "the line is the share of the step the GPU was busy.</p>"
        '<details><summary>Steps as a table</summary><table><thead><tr><th class="n">step</th><th class="n">ms</th>'
        f'<th class="n">GPU busy</th><th>complete</th></tr></thead><tbody>{rows}</tbody></table></details></section>'
    )


def _timeline_section(d: Diagnosis, view: StepView | None) -> str:
    if view is None:
        return "<section><h2>Timeline</h2><p class=\"muted\">No step to draw: the trace has no step windows.</p></section>"
    dur_ms = (view.end_ns - view.start_ns) / 1e6
    device = d.timeline.primary_device.get(view.rank)
    row = d.timeline.per_step.filter(
        (pl.col("rank") == view.rank) & (pl.col("device") == (-1 if device is None else device)) & (pl.col("step") == view.step)
    )
    idle = ""
    if row.height:
        r = row.row(0, named=True)
        idle = ", ".join(
            f"{CAUSE_LABELS[c]} {fmt_ms(r[f'{c}_ns'] / 1e6)}" for c in CAUSES if c != "compute" and r[f"{c}_ns"] > 0
        )
    cp = getattr(d, "critical_path", None)
    return (
        f"<section><h2>Timeline of step {view.step} (rank {view.rank})</h2>"
        f'<p class="caption">The complete step closest to the median, {dur_ms:,.2f} ms. Lanes are CPU threads and GPU '
        "streams; under each GPU its idle gaps are coloured by cause (and shaded over its streams); dashed red lines "
        "mark sync points; the magenta line is the critical path. Hover for names and durations.</p>"
        f'<div class="figure">{timeline_svg(view, critical_path=cp)}</div>'
        + (f'<p class="caption">Idle time of GPU {device} in this step: {_e(idle)}.</p>' if idle else "")
        + "</section>"
    )


def _findings_section(d: Diagnosis, data: dict[str, Any]) -> str:
    s = data["summary"]
    if not d.findings:
        if s["gpu_utilization"] is None:
            msg = "No findings: the trace has no GPU activity to measure."
        elif (s["gpu_utilization"] or 0) >= 0.95:
            msg = "No findings: the GPU is busy; nothing to fix on the idle side."
        else:
            msg = "No findings: nothing costs 5% or more of the step time."
        return f"<section><h2>Findings</h2><p>{_e(msg)}</p></section>"
    items = [_finding_html(i, f) for i, f in enumerate(d.findings, 1)]
    return "<section><h2>Findings <span class=\"muted\">(largest cost first)</span></h2>" + "".join(items) + "</section>"


def _finding_html(i: int, f: Finding) -> str:
    color = CAUSE_COLORS.get(f.kind, CAUSE_COLORS["launch_bound"] if f.kind == "small_batch" else "#999999")
    cost = f"{f.ms_per_step:,.2f} ms per step ({100 * f.share_of_step:.1f}% of the step) in {f.steps_affected} steps"
    if f.worst_steps:
        cost += "; worst steps " + ", ".join(str(x) for x in f.worst_steps)
    parts = [
        f'<div class="finding" style="border-left-color: {color}">',
        f'<h3>{i}. {_e(f.title)} <span class="kind">{_e(f.kind)}</span></h3>',
        f'<p class="cost">{_e(cost)}</p>',
    ]
    if f.predicted_step_ms is not None:
        parts.append(f"<p>Predicted step time if fixed: <b>{f.predicted_step_ms:,.2f} ms</b></p>")
    if f.modelled_fix:
        parts.append(f"<p><b>Fix modelled (replay):</b> {_e(f.modelled_fix)}</p>")
    summary = _evidence_text(f)
    if summary:
        parts.append(f"<p><b>Evidence:</b> {_e(summary)}</p>")
    if f.evidence:
        parts.append(f"<details><summary>All evidence</summary>{_value_html(f.evidence)}</details>")
    parts.append(f"<p><b>Fix:</b> {_e(f.fix)}</p></div>")
    return "".join(parts)


def _value_html(value: Any) -> str:
    if isinstance(value, dict):
        return '<dl class="ev">' + "".join(f"<dt>{_e(k)}</dt><dd>{_value_html(v)}</dd>" for k, v in value.items()) + "</dl>"
    if isinstance(value, (list, tuple)):
        if not value:
            return '<span class="muted">none</span>'
        if all(isinstance(v, dict) for v in value):
            return "<ul>" + "".join(
                "<li>" + _e(", ".join(f"{k}: {v}" for k, v in item.items())) + "</li>" for item in value
            ) + "</ul>"
        return _e(", ".join(str(v) for v in value))
    if isinstance(value, bool):
        return "yes" if value else "no"
    return _e(value)


def _syncs_section(data: dict[str, Any]) -> str:
    sp = data["sync_points"]
    if not sp["count"]:
        return ""
    rows = "".join(
        f'<tr><td class="mono">{_e(t["api"])}</td><td class="mono">{_e(t["op"] or "")}</td><td>{_e(t["sync_kind"] or "")}</td>'
        f'<td class="n">{t["count"]}</td><td class="n">{t["blocked_ms"]:,.3f}</td></tr>'
        for t in sp["top"]
    )
    return (
        f"<section><h2>Sync points</h2><p>{sp['count']} sync points ({sp['per_step']} per step, {sp['explicit']} from "
        f"explicit sync events); the host was blocked {sp['blocked_ms']:,.1f} ms in them.</p>"
        '<table><thead><tr><th>call</th><th>operator</th><th>kind</th><th class="n">count</th>'
        f'<th class="n">blocked ms</th></tr></thead><tbody>{rows}</tbody></table></section>'
    )


def _kernels_section(data: dict[str, Any]) -> str:
    k = data["kernels"]
    if not k["count"]:
        return ""
    delay = k["launch_delay_us"]
    lines = (
        f"{k['count']:,} kernels, {k['time_ms']:,.1f} ms in all; median {k['median_us']} µs; "
        f"{100 * (k['short_kernel_share'] or 0):.0f}% shorter than 10 µs"
    )
    if delay.get("p50") is not None:
        lines += f"; launch delay p50 {delay['p50']} µs, p90 {delay['p90']} µs"
    rows = []
    for r in k["top"]:
        tc = {True: "yes", False: "no (fp32)"}.get(r["tensor_cores"], "?")
        rows.append(
            f'<tr><td class="kernel mono" title="{_e(r["name"])}">{_e(_short(r["name"], 110))}</td><td>{_e(r["category"])}</td>'
            f'<td>{tc}</td><td class="n">{r["count"]:,}</td><td class="n">{r["total_ms"]:,.2f}</td>'
            f'<td class="n">{r["mean_us"]:,.1f}</td><td class="n">{100 * (r["share"] or 0):.1f}%</td></tr>'
        )
    return (
        f"<section><h2>Top kernels</h2><p>{_e(lines)}.</p>"
        '<table><thead><tr><th>kernel</th><th>category</th><th>tensor cores</th><th class="n">count</th>'
        '<th class="n">total ms</th><th class="n">mean µs</th><th class="n">share</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></section>"
    )


def _memory_section(data: dict[str, Any]) -> str:
    mem = [m for m in data["memory"] if m["peak_reserved_bytes"] or m["peak_allocated_bytes"]]
    if not mem:
        return ""
    rows = "".join(
        f'<tr><td class="n">{m["device"]}</td><td class="n">{_gib(m["peak_allocated_bytes"])}</td>'
        f'<td class="n">{_gib(m["peak_reserved_bytes"])}</td><td class="n">{_gib(m["total_bytes"])}</td>'
        f'<td class="n">{_pct(m["headroom"])}</td></tr>'
        for m in mem
    )
    return (
        "<section><h2>Device memory</h2><table><thead><tr><th class=\"n\">device</th><th class=\"n\">peak allocated</th>"
        '<th class="n">peak reserved</th><th class="n">total</th><th class="n">unused at peak</th></tr></thead>'
        f"<tbody>{rows}</tbody></table></section>"
    )


def _gib(b: int | None) -> str:
    return "n/a" if b is None else f"{b / 2**30:,.2f} GiB"


def _short(name: str, width: int) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


__all__ = ["render_html"]
