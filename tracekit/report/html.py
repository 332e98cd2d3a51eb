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

from collections.abc import Callable, Sequence
from typing import Any

import polars as pl

from .._version import __version__
from ..analysis import Diagnosis
from ..analysis.causes import ACTIONS, CAUSE_LABELS, CAUSES, cause_label, finding_color
from ..analysis.efficiency import mfu_pct, nonzero_digits
from ..analysis.findings import Finding
from ..analysis.plan import PlanStep
from ..analysis.view import StepView
from ..pipeline import FolderResult, JobResult, TraceResult
from . import formatting
from .formatting import (
    SPLIT_LABELS,
    evidence_text,
    finding_cost,
    fmt_num,
    fmt_pct,
    headline,
    intermittent_prediction,
    job_evidence_text,
    job_label,
    job_lines,
    location_text,
)
from .json_report import JSON_SCHEMA_VERSION, to_json_dict
from .registry import register
from .svg import breakdown_svg, fmt_ms, lanes_step, plan_svg, rank_lanes_svg, roofline_svg, steps_svg, timeline_svg

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
header .answer { font-size: 16px; font-weight: 600; margin: 8px 0 0; }
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


def render_html(d: Diagnosis, view: StepView | None = None) -> str:
    """The whole report as one HTML document (see the module docstring)."""
    data = to_json_dict(d)
    return html_page(f"tracekit · {data['trace']['path']}", report_sections(d, view, data))


def report_sections(d: Diagnosis, view: StepView | None, data: dict[str, Any] | None = None) -> list[str]:
    """The report's sections in page order (empty strings for sections with nothing to show)."""
    data = to_json_dict(d) if data is None else data
    return [
        header_html(d, data),
        _cards(d, data),
        plan_section(d),
        breakdown_section(d),
        _steps_section(d, view),
        _timeline_section(d, view),
        _efficiency_section(d, data),
        _findings_section(d, data),
        _syncs_section(data),
        _kernels_section(data),
        _memory_section(data),
        notes_section(data),
        FOOTER,
    ]


def render_html_fragment(d: Diagnosis, view: StepView | None = None) -> str:
    """The report as an HTML fragment for a notebook cell: the headline, the step-time breakdown, the
    timeline of ``view``'s step and the findings with their fixes, the rest folded away
    (:func:`html_fragment`; no script, nothing loaded from the network)."""
    data = to_json_dict(d)
    more = [_steps_section(d, view), _syncs_section(data), _kernels_section(data), _memory_section(data)]
    parts = [
        header_html(d, data),
        _cards(d, data),
        plan_section(d),
        breakdown_section(d),
        _timeline_section(d, view),
        _findings_section(d, data),
        notes_section(data),
        folded("Steps, sync points, kernels and memory", more),
    ]
    return html_fragment(parts)


def header_html(d: Diagnosis, data: dict[str, Any]) -> str:
    answer = f'<p class="answer">{_e(data["answer"])}</p>' if data.get("answer") else ""
    return (
        f'<header><h1>tracekit diagnosis</h1><p class="path">{_e(data["trace"]["path"])}</p>'
        f'{answer}<p class="meta">{_e(headline(d, data)[0])}</p></header>'
    )


def plan_section(d: Diagnosis) -> str:
    """The fix plan: a picture of the step time after each step, then the steps in words."""
    plan = d.plan
    if not plan.steps or plan.step_ms is None:
        return f"<section><h2>Fix plan</h2><p>{_e(plan.note)}</p></section>" if plan.note else ""
    bars = [(st.action, st.predicted_step_ms, finding_color(st.kind)) for st in plan.steps]
    bound = f'<p class="caption">Then the step is bound by {_e(plan.bound.text)}.</p>' if plan.bound is not None else ""
    return (
        "<section><h2>Fix plan <span class=\"muted\">(in order; each step priced with the earlier ones applied)</span></h2>"
        f'<div class="figure">{plan_svg(plan.step_ms, bars)}</div>'
        + "".join(_plan_step_html(i, st) for i, st in enumerate(plan.steps, 1))
        + bound + "</section>"
    )


def _plan_step_html(i: int, st: PlanStep) -> str:
    alts = "".join(f"<li>or instead: {_e(ACTIONS.get(a) or a)} <span class=\"kind\">{_e(a)}</span> (about the same saving)</li>"
                   for a in st.alternatives)
    loc = location_text(st.location)
    where = f"<li>at <code>{_e(loc)}</code></li>" if loc else ""
    util = "" if st.gpu_utilization is None else f", GPU busy after it {st.gpu_utilization:.0%}"
    return (
        f'<div class="finding" style="border-left-color: {finding_color(st.kind)}">'
        f'<h3>{i}. {_e(st.action[0].upper() + st.action[1:])} <span class="kind">{_e(st.kind)}</span></h3>'
        f"<p>Step <b>{st.predicted_step_ms:,.2f} ms</b> (saves {st.saves_ms:,.2f} ms per step{util})</p>"
        f"<ul>{where}{alts}</ul></div>"
    )


def breakdown_section(d: Diagnosis, *, title: str = "Where the step time goes") -> str:
    if not d.breakdown:
        return ""
    return (
        f"<section><h2>{_e(title)}</h2>"
        f'<div class="figure">{breakdown_svg(d.breakdown, d.breakdown_ms)}</div>'
        '<p class="caption">Every nanosecond of a step is either GPU busy time (compute, or only communication / '
        "pageable copies running) or an idle gap charged to the cause the host was busy with; the parts add up "
        "to the step. Mean over complete steps of the busiest GPU.</p></section>"
    )


def notes_section(data: dict[str, Any]) -> str:
    notes = [*data["data_quality"], *data["warnings"]]
    if not notes:
        return ""
    return "<section><h2>Notes</h2><ul>" + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul></section>"


FOOTER = (
    f"<footer>tracekit {_e(__version__)} · report schema {_e(JSON_SCHEMA_VERSION)} · "
    "self-contained page: no script, no network</footer>"
)


def folded(summary: str, parts: list[str], *, opened: bool = False) -> str:
    """``parts`` inside a ``<details>``, closed unless ``opened`` (nothing when every part is empty)."""
    inner = "\n".join(part for part in parts if part)
    if not inner:
        return ""
    return f'<details class="more"{" open" if opened else ""}><summary>{_e(summary)}</summary>\n{inner}\n</details>'


def html_page(title: str, parts: list[str]) -> str:
    """A whole self-contained document around ``parts`` (empty parts are left out)."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta name="generator" content="tracekit {_e(__version__)}">\n'
        f"<title>{_e(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<main>\n"
        + "\n".join(part for part in parts if part)
        + "\n</main>\n</body>\n</html>\n"
    )


#: the class of the element that holds a fragment; the fragment's style applies only inside it
FRAGMENT_CLASS = "tracekit-report"


def html_fragment(parts: list[str]) -> str:
    """``parts`` in one ``<div>`` with the report's style scoped to it, for embedding in another page
    (a notebook cell): no page-wide rules, pictures shrink to the cell's width."""
    return (
        f'<div class="{FRAGMENT_CLASS}">\n<style>{scoped_style()}</style>\n'
        + "\n".join(part for part in parts if part)
        + "\n</div>\n"
    )


def scoped_style(root: str = f".{FRAGMENT_CLASS}") -> str:
    """:data:`STYLE` with every rule confined to ``root``: the page's body rule styles ``root``
    itself, page-level rules (``:root``, ``main``) are dropped."""
    import re

    out: list[str] = []
    for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", STYLE):
        names = [" ".join(s.split()) for s in selectors.split(",")]
        if names in (["main"], [":root"]):
            continue
        if names == ["body"]:
            out.append(f"{root} {{ {body.strip()} padding: 2px 14px 10px; border-radius: 8px; }}")
            continue
        out.append(", ".join(f"{root} {n}" for n in names) + f" {{ {' '.join(body.split())} }}")
    out.append(f"{root} .figure svg {{ max-width: 100%; height: auto; }}")
    out.append(f"{root} .card {{ flex-basis: 150px; }}")
    out.append(f"{root} details.more > summary {{ margin: 8px 0; font-weight: 600; }}")
    return "\n".join(out)


def _cards(d: Diagnosis, data: dict[str, Any]) -> str:
    s = data["summary"]
    top = d.findings[0] if d.findings else None
    cards = [
        ("step time (median)", formatting.fmt_ms(s["step_ms_median"]), f"mean {formatting.fmt_ms(s['step_ms_mean'])}"),
        ("GPU utilization", fmt_pct(s["gpu_utilization"]), "busy share of step time"),
        ("MFU", _mfu_value(d, s["mfu"]), _mfu_sub(data)),
        ("steps", f"{s['complete_steps']}", f"complete, of {s['steps']} windows" + (f" · from {s['step_source']}" if s["step_source"] else "")),
        (
            "largest cost",
            _e(cause_label(top.kind)) if top else "none",
            f"{top.ms_per_step:,.2f} ms per step ({100 * top.share_of_step:.1f}%)" if top else "nothing costs 5% or more",
        ),
    ]
    inner = "".join(
        f'<div class="card"><div class="k">{_e(k)}</div><div class="v">{v if k == "largest cost" else _e(v)}</div>'
        f'<div class="muted">{_e(sub)}</div></div>'
        for k, v, sub in cards
    )
    return f'<section class="cards">{inner}</section>'


def _mfu_value(d: Diagnosis, rounded: float | None) -> str:
    """The MFU card's value: n/a without one, and a tiny MFU with the digits that keep it from
    reading as 0.0% (the headline's wording, from the unrounded value)."""
    mfu = d.efficiency.mfu
    if rounded is None or mfu is None:
        return "n/a"
    return fmt_pct(rounded) if mfu >= 0.001 else mfu_pct(mfu)


def _mfu_sub(data: dict[str, Any]) -> str:
    eff = data["efficiency"]
    if eff["mfu"] is None:
        return str(data["summary"]["mfu_note"]).removeprefix("MFU n/a: ")
    return f"of the {eff['mfu_dtype']} peak of {eff['device']['model']}"


def _efficiency_section(d: Diagnosis, data: dict[str, Any]) -> str:
    eff, e = d.efficiency, data["efficiency"]
    if not eff.available:
        return f"<section><h2>How well the busy time is used</h2><p class=\"muted\">{_e(data['summary']['mfu_note'])}</p></section>"
    parts = ["<section><h2>How well the busy time is used (roofline)</h2>", f"<p>{_e(data['summary']['mfu_note'])}"]
    if d.efficiency.achieved_tflops is not None:
        parts.append(f"; {nonzero_digits(d.efficiency.achieved_tflops)} model TFLOP/s achieved over the step")
    parts.append(".")
    if e["split"]:
        parts.append(" Step time: " + _e(" · ".join(f"{SPLIT_LABELS[k]} {fmt_pct(v)}" for k, v in e["split"].items())) + ".")
    parts.append("</p>")
    p = eff.peaks
    matrix = eff.by_op.filter(pl.col("op_class").is_in(["gemm", "conv", "attention"]))
    if p is not None and eff.mfu_dtype is not None and (peak := p.tflops(eff.mfu_dtype)) and matrix.height:
        parts.append(
            f'<div class="figure">{roofline_svg(matrix, peak_tflops=peak, memory_gbps=p.memory_gbps, dtype=eff.mfu_dtype, fp32_tflops=p.fp32_tflops)}</div>'
            '<p class="caption">Each dot is one operator shape (area: its share of GPU time) at its arithmetic intensity '
            "and achieved TFLOP/s; the roof is the most the device can do at that intensity. Dots far under the roof "
            "leave speed on the table; left of the knee the operator is memory-bound. Elementwise and normalisation "
            "operators do no model FLOPs and are judged on bandwidth in the tables.</p>"
        )
    rows = "".join(
        f'<tr><td>{_e(c["op_class"])}</td><td class="n">{c["gpu_ns"] / 1e6:,.2f}</td><td class="n">{fmt_num(c["tflops"])}</td>'
        f'<td class="n">{fmt_num(c["gbps"], 0)}</td><td>{_e(c["bound"] or "?")}</td><td class="n">{fmt_pct(c["pct_of_attainable"])}</td>'
        f'<td class="n">{fmt_pct(c["share_of_gpu_time"])}</td></tr>'
        for c in e["by_class"]
    )
    parts.append(
        '<table><thead><tr><th>class</th><th class="n">ms</th><th class="n">TFLOP/s</th><th class="n">GB/s</th><th>bound</th>'
        f'<th class="n">of attainable</th><th class="n">share of GPU time</th></tr></thead><tbody>{rows}</tbody></table>'
    )
    ops = "".join(
        f'<tr><td class="mono">{_e(o["name"])}</td><td class="mono">{_e(o["shape"] or "")}</td><td>{_e(o["dtype"] or "?")}</td>'
        f'<td class="n">{o["calls"]:,}</td><td class="n">{o["gpu_ns"] / 1e6:,.2f}</td><td class="n">{fmt_num(o["tflops"])}</td>'
        f'<td class="n">{fmt_num(o["gbps"], 0)}</td><td>{_e(o["bound"] or "?")}</td><td class="n">{fmt_pct(o["pct_of_attainable"])}</td></tr>'
        for o in e["top_ops"]
    )
    parts.append(
        '<details><summary>Top operators by GPU time</summary><table><thead><tr><th>operator</th><th>shape</th><th>dtype</th>'
        '<th class="n">calls</th><th class="n">ms</th><th class="n">TFLOP/s</th><th class="n">GB/s</th><th>bound</th>'
        f'<th class="n">of attainable</th></tr></thead><tbody>{ops}</tbody></table></details></section>'
    )
    return "".join(parts)


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
        f'<td class="n">{fmt_pct(r["utilization"])}</td><td>{"yes" if r["complete"] else "no (partial window)"}</td></tr>'
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


def _finding_html(i: int, f: Finding, evidence: Callable[[Finding], str] = evidence_text) -> str:
    color = finding_color(f.kind)
    cost = finding_cost(f)
    parts = [
        f'<div class="finding" style="border-left-color: {color}">',
        f'<h3>{i}. {_e(f.title)} <span class="kind">{_e(f.kind)}</span></h3>',
        f'<p class="cost">{_e(cost)}</p>',
    ]
    intermittent = intermittent_prediction(f, number=lambda figure: f"<b>{figure}</b>")
    if intermittent:
        parts.append(f"<p>{intermittent[0].upper()}{intermittent[1:]}</p>")
    elif f.predicted_step_ms is not None:
        parts.append(f"<p>Predicted step time if fixed: <b>{f.predicted_step_ms:,.2f} ms</b></p>")
    if f.modelled_fix:
        parts.append(f"<p><b>Fix modelled (replay):</b> {_e(f.modelled_fix)}</p>")
    summary = evidence(f)
    if summary:
        parts.append(f"<p><b>Evidence:</b> {_e(summary)}</p>")
    if f.evidence:
        parts.append(f"<details><summary>All evidence</summary>{_value_html(f.evidence)}</details>")
    if f.location is not None:
        parts.append(f"<p><b>Where in the code:</b> <code>{_e(location_text(f.location))}</code></p>")
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
        f'<td class="n">{fmt_pct(m["headroom"])}</td></tr>'
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


# --------------------------------------------------------------------------- jobs


def job_sections(jd: Any, view: StepView | None = None, *, open_ranks: int = 1, show_skipped: bool = True) -> list[str]:
    """A job of ranks (:class:`tracekit.reading.job.JobDiagnosis`): the ranks side by side, the findings across
    ranks, then each rank's breakdown and findings (the first ``open_ranks`` unfolded; ``view``, a
    step of one of the ranks, adds that rank's timeline)."""
    head, data = job_lines(jd)
    j = data["job"]
    parts = [f'<header><h1>tracekit diagnosis: job</h1><p class="path">{_e(j["name"])}</p><p class="meta">{_e(head[1])}</p></header>']
    straggle = (f"rank {', '.join(str(r) for r in j['stragglers'])}" if j["stragglers"] else "none")
    cards = [
        ("ranks", f"{len(j['ranks'])}", f"{len(j['files'])} file{'s' if len(j['files']) != 1 else ''}"
         + (f" · world size {j['world_size']}" if j["world_size"] else "")),
        ("step time (median)", formatting.fmt_ms(j["step_ms_median"]), f"{j['aligned_steps']} steps aligned across ranks"),
        ("stragglers", straggle, f"others wait up to {formatting.fmt_ms(j['straggle_ms_per_step'])} per step" if j["stragglers"] else "no rank is late"),
        ("load imbalance", fmt_pct(j["imbalance"]), f"compute spread {formatting.fmt_ms(j['compute_spread_ms'])} per step"),
    ]
    parts.append('<section class="cards">' + "".join(
        f'<div class="card"><div class="k">{_e(k)}</div><div class="v">{_e(v)}</div><div class="muted">{_e(sub)}</div></div>'
        for k, v, sub in cards) + "</section>")
    parts.append(_ranks_table(j["per_rank"]))
    lanes = _rank_lanes_section(getattr(jd, "model", None))
    if lanes:
        parts.append(lanes)
    if jd.multirank.findings:
        items = "".join(_finding_html(i, f, job_evidence_text) for i, f in enumerate(jd.multirank.findings, 1))
        parts.append(f'<section><h2>Findings across ranks <span class="muted">(largest cost first)</span></h2>{items}</section>')
    elif len(j["ranks"]) > 1:
        parts.append("<section><h2>Findings across ranks</h2><p>None: no straggler, imbalance or exposed "
                     "communication costs 5% of the step.</p></section>")
    notes = [*j["notes"], *(f"skipped {s['path']}: {s['reason']}" for s in j["skipped"] if show_skipped)]
    if notes:
        parts.append("<section><h2>Notes on the job</h2><ul>" + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul></section>")
    for i, rank in enumerate(sorted(jd.diagnoses)):
        d = jd.diagnoses[rank]
        rank_view = view if view is not None and view.rank == rank else None
        parts.append(_rank_details(rank, d, rank_view, opened=i < open_ranks))
    return parts


def _rank_lanes_section(model: Any) -> str:
    """The job's ranks side by side for one step (the job model's aligned collectives), or ""."""
    lanes = getattr(model, "lanes", None)
    if lanes is None or lanes.height == 0:
        return ""
    step = lanes_step(lanes)
    if step is None:
        return ""
    how = f" Collectives matched by {model.matching}." if model.matching else ""
    return (
        f"<section><h2>Rank lanes of step {step}</h2>"
        '<p class="caption">One lane per rank on the aligned clock (each rank\'s offset removed). Grey: the rank\'s work '
        "between collectives; magenta: that work where the cross-rank critical path runs (the rank everyone waited for); "
        "light blue: waiting inside a collective for the last rank; dark blue: the collective itself; a dashed line joins "
        f"the ends of one collective on its ranks. Hover for durations.{_e(how)}</p>"
        f'<div class="figure">{rank_lanes_svg(lanes, step)}</div></section>'
    )


def _ranks_table(per_rank: Sequence[dict[str, Any]]) -> str:
    def num(x: float | None) -> str:
        return "n/a" if x is None else f"{x:,.2f}"

    rows = "".join(
        f'<tr><td class="n">{r["rank"]}{" *" if r["straggler"] else ""}</td><td class="n">{r["steps"]}</td>'
        f'<td class="n">{num(r["step_ms_median"])}</td><td class="n">{fmt_pct(r["gpu_utilization"])}</td>'
        f'<td class="n">{num(r["compute_ms"])}</td><td class="n">{num(r["exposed_communication_ms"])}</td>'
        f'<td class="n">{num(r["late_ms"])}</td><td class="n">{num(r["wait_ms"])}</td>'
        f'<td class="mono">{_e(r["top_finding"] or "")}</td><td class="mono">{_e(str(r["path"]).rsplit("/", 1)[-1])}</td></tr>'
        for r in per_rank
    )
    return (
        '<section><h2>Ranks <span class="muted">(ms per step; * straggler)</span></h2><table><thead><tr>'
        '<th class="n">rank</th><th class="n">steps</th><th class="n">step</th><th class="n">GPU busy</th>'
        '<th class="n">compute</th><th class="n">exposed comm</th><th class="n">late</th><th class="n">wait</th>'
        f"<th>top finding</th><th>file</th></tr></thead><tbody>{rows}</tbody></table></section>"
    )


def _rank_details(rank: int, d: Diagnosis, view: StepView | None, *, opened: bool) -> str:
    data = to_json_dict(d)
    head = headline(d, data)
    inner = [breakdown_section(d), _timeline_section(d, view) if view is not None else "", _findings_section(d, data)]
    body = "\n".join(part for part in inner if part)
    return (
        f'<details class="more"{" open" if opened else ""}><summary>Rank {rank} · {_e(head[1])}</summary>\n'
        f"{body}\n</details>"
    )


def render_job_html(jd: Any, view: StepView | None = None) -> str:
    """The HTML page of a job of ranks (see :func:`job_sections`)."""
    return html_page(f"tracekit · job {jd.job.name}", [*job_sections(jd, view), FOOTER])


#: up to this many jobs, every job's summary is unfolded
OPEN_JOBS = 4


def jobs_sections(title: str, jobs: Sequence[Any], skipped: Sequence[tuple[str, str]] = ()) -> list[str]:
    """Several jobs (:class:`tracekit.reading.job.JobDiagnosis`, e.g. the jobs of the folder ``title``; names
    under it are shown relative to it): one row per job, then each job's own summary (unfolded for
    up to :data:`OPEN_JOBS` jobs); ``skipped`` lists (path, reason) of files that are not traces."""
    from .json_report import job_to_json_dict

    rows = []
    for jd in jobs:
        j = job_to_json_dict(jd)
        s, top = j["summary"], (jd.multirank.findings or jd.diagnoses[min(jd.diagnoses)].findings or (None,))[0]
        rows.append(
            f'<tr><td class="mono">{_e(job_label(title, jd.job.name))}</td><td class="n">{len(j["job"]["ranks"])}</td>'
            f'<td class="n">{s["complete_steps"]}</td><td class="n">{formatting.fmt_ms(j["job"]["step_ms_median"])}</td>'
            f'<td class="n">{fmt_pct(s["gpu_utilization"])}</td>'
            f"<td>{_e(top.title) if top else 'none'}</td>"
            f'<td class="n">{formatting.fmt_ms(top.ms_per_step) if top else ""}</td></tr>'
        )
    parts = [
        f'<header><h1>tracekit diagnosis: {len(jobs)} job{"s" if len(jobs) != 1 else ""}</h1>'
        f'<p class="path">{_e(title)}</p></header>',
        '<section><h2>Jobs</h2><table><thead><tr><th>job</th><th class="n">ranks</th><th class="n">steps</th>'
        '<th class="n">step time</th><th class="n">GPU busy</th><th>largest finding</th><th class="n">per step</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
        '<p class="caption">Steps and GPU busy share of each job\'s lowest rank; step time is the median over steps aligned '
        "across ranks.</p></section>",
    ]
    for jd in jobs:
        if len(jd.diagnoses) == 1:
            d = next(iter(jd.diagnoses.values()))
            data = to_json_dict(d)
            inner = [breakdown_section(d), _findings_section(d, data)]
            parts.append(folded(f"{job_label(title, jd.job.name)} · {headline(d, data)[1]}", inner, opened=len(jobs) <= OPEN_JOBS))
        else:
            head, _ = job_lines(jd)
            parts.append(folded(f"{job_label(title, jd.job.name)} · {head[1]}", job_sections(jd, open_ranks=0, show_skipped=False)[1:],
                                opened=len(jobs) <= OPEN_JOBS))
    if skipped:
        items = "".join(f"<li><code>{_e(job_label(title, p))}</code>: {_e(reason)}</li>" for p, reason in skipped)
        parts.append(folded(f"Skipped {len(skipped)} file(s) that are not traces tracekit reads", [f"<section><ul>{items}</ul></section>"]))
    return parts


def render_jobs_html(title: str, jobs: Sequence[Any], skipped: Sequence[tuple[str, str]] = ()) -> str:
    """The HTML page of several jobs (see :func:`jobs_sections`)."""
    return html_page(f"tracekit · {title}", [*jobs_sections(title, jobs, skipped), FOOTER])


# --------------------------------------------------------------------------- registered renderings

# the pipeline's results as a page and as the notebook's fragment (tracekit.report.registry)
register(TraceResult, "html", lambda r: render_html(r.diagnosis, r.view()))
register(TraceResult, "fragment", lambda r: render_html_fragment(r.diagnosis, r.view()))
register(JobResult, "html", lambda r: render_job_html(r.job_diagnosis, r.view()))
register(JobResult, "fragment", lambda r: html_fragment(job_sections(r.job_diagnosis, r.view())))
register(FolderResult, "html", lambda r: render_jobs_html(r.folder, r.job_diagnoses, list(r.skipped)))
register(FolderResult, "fragment", lambda r: html_fragment(jobs_sections(r.folder, r.job_diagnoses, list(r.skipped))))


__all__ = [
    "FRAGMENT_CLASS", "html_fragment", "html_page", "job_sections", "jobs_sections", "render_html", "render_html_fragment",
    "render_job_html", "render_jobs_html", "report_sections", "scoped_style",
]
