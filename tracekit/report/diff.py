"""Renderings of a :class:`~tracekit.analysis.compare.DiffResult`: terminal text, Markdown and JSON.

The JSON document (``tracekit.diff/1``, documented in docs/reports.md) is a contract for CI
scripts: ``step_ms`` {before, after, delta_ms, delta_pct}, ``gpu_utilization`` {before, after,
delta}, ``mfu`` {before, after, delta, dtype, peak_tflops, reason, caveat}, ``model_tflops``,
``causes.<cause>.ms_per_step`` {before, after, delta_ms}, ``findings[]`` with a status,
``kernels[]``.  Like every renderer, these only format numbers :func:`compare` computed.
"""

from __future__ import annotations

from typing import Any

from .._version import __version__
from ..analysis.causes import cause_label
from ..analysis.compare import Change, DiffResult, DiffSide, EfficiencyChange
from ..analysis.efficiency import mfu_pct
from ..pipeline import Comparison
from .registry import register, register_document

DIFF_SCHEMA_VERSION = "tracekit.diff/1"

#: causes below this share on both sides are left out of the text and Markdown tables
_MIN_SHARE = 0.0005


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(float(x), nd) + 0.0  # + 0.0: no "-0.0" from rounding


def _side_json(s: DiffSide) -> dict[str, Any]:
    return {
        "path": s.path,
        "format": s.format,
        "format_version": s.format_version,
        "devices": list(s.devices),
        "steps": s.steps,
        "complete_steps": s.complete_steps,
        "step_source": s.step_source,
        "world_size": s.world_size,
    }


def _change_json(c: Change, *, delta_key: str = "delta", pct: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"before": _r(c.before), "after": _r(c.after), delta_key: _r(c.delta)}
    if pct:
        out["delta_pct"] = _r(c.delta_pct, 2)
    return out


def _mfu_json(e: EfficiencyChange) -> dict[str, Any]:
    return {
        **_change_json(e.mfu),
        "dtype": {"before": e.mfu_dtype_before, "after": e.mfu_dtype_after},
        "peak_tflops": {"before": e.peak_tflops_before, "after": e.peak_tflops_after},
        "reason": e.reason,
        "caveat": e.caveat,
    }


def diff_to_json_dict(r: DiffResult) -> dict[str, Any]:
    """The ``tracekit.diff/1`` document."""
    return {
        "schema": DIFF_SCHEMA_VERSION,
        "tracekit_version": __version__,
        "before": _side_json(r.before),
        "after": _side_json(r.after),
        "verdict": r.verdict,
        "verdict_reasons": list(r.verdict_reasons),
        "plan_check": None if r.plan is None else {
            "step": r.plan.step, "kinds": list(r.plan.kinds), "via": dict(r.plan.via), "predicted_ms": _r(r.plan.predicted_ms),
            "measured_ms": _r(r.plan.measured_ms), "error_pct": _r(r.plan.error_pct, 2),
        },
        "noise_pct": _r(r.noise_pct, 2),
        "step_ms": _change_json(r.step_ms, delta_key="delta_ms", pct=True),
        "step_ms_mean": _change_json(r.step_ms_mean, delta_key="delta_ms", pct=True),
        "gpu_utilization": _change_json(r.gpu_utilization),
        "mfu": _mfu_json(r.efficiency),
        "model_tflops": _change_json(r.efficiency.model_tflops, pct=True),
        "causes": {
            c.cause: {
                "ms_per_step": _change_json(c.ms_per_step, delta_key="delta_ms"),
                "share": {"before": _r(c.share.before), "after": _r(c.share.after)},
            }
            for c in r.causes
        },
        "findings": [
            {
                "kind": f.kind,
                "title": f.title,
                "status": f.status,
                "ms_per_step": _change_json(f.ms_per_step, delta_key="delta_ms"),
                "predicted_step_ms": {"before": _r(f.predicted_step_ms.before), "after": _r(f.predicted_step_ms.after)},
                "fix": f.fix,
            }
            for f in r.findings
        ],
        "kernels": [
            {
                "name": k.name,
                "category": k.category,
                "ms_per_step": _change_json(k.ms_per_step, delta_key="delta_ms"),
                "count_per_step": {"before": _r(k.count_per_step.before), "after": _r(k.count_per_step.after)},
            }
            for k in r.kernels
        ],
        "sync_points_per_step": _change_json(r.sync_points_per_step),
        "kernels_per_step": _change_json(r.kernels_per_step),
        "median_kernel_us": _change_json(r.median_kernel_us),
        "notes": list(r.notes),
    }


# --------------------------------------------------------------------------- formatting helpers


def _num(x: float | None, nd: int = 2, unit: str = "") -> str:
    return "—" if x is None else f"{x:,.{nd}f}{unit}"


def _signed(x: float | None, nd: int = 2, unit: str = "") -> str:
    if x is None:
        return "—"
    if round(x, nd) == 0:
        x = 0.0
    return f"{x:+,.{nd}f}{unit}"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def diff_headline(r: DiffResult) -> str:
    s = r.step_ms
    if s.delta_pct is None:
        return "not comparable: step times cannot be compared (a trace has no complete step)"
    change = f"{_signed(s.delta, 2, ' ms')} per step ({_signed(s.delta_pct, 1, '%')})"
    noise = "" if r.noise_pct is None else f", noise ±{r.noise_pct:.1f}%"
    return {
        "faster": f"faster: {change}{noise}",
        "slower": f"slower: {change}{noise}",
        "within_noise": f"within noise: {change}{noise}",
    }.get(r.verdict, f"not comparable: {change} measured, but the step times do not measure the same thing")


def _reasons(r: DiffResult) -> list[str]:
    """The verdict's reasons worth a line: all of them for ``not_comparable``."""
    return list(r.verdict_reasons) if r.verdict == "not_comparable" else []


def _describe(s: DiffSide) -> str:
    parts = [s.format + (f" {s.format_version}" if s.format_version else "")]
    if s.devices:
        parts.append(", ".join(s.devices))
    parts.append(f"{s.complete_steps} steps" + (f" (from {s.step_source})" if s.step_source else ""))
    return " · ".join(parts)


def _mfu_cell(mfu: float | None, dtype: str | None) -> str:
    return "n/a" if mfu is None else mfu_pct(mfu) + (f" {dtype}" if dtype else "")


def _efficiency_rows(e: EfficiencyChange) -> list[tuple[str, str, str, str]]:
    m, t = e.mfu, e.model_tflops
    rows = [("MFU", _mfu_cell(m.before, e.mfu_dtype_before), _mfu_cell(m.after, e.mfu_dtype_after),
             _signed(None if m.delta is None else 100 * m.delta, 1, " pts"))]
    if t.before is not None or t.after is not None:
        delta = "—" if t.delta is None else f"{_signed(t.delta, 1)} ({_signed(t.delta_pct, 1, '%')})"
        rows.append(("model TFLOP/s", _num(t.before, 1), _num(t.after, 1), delta))
    return rows


def _efficiency_lines(e: EfficiencyChange) -> list[str]:
    """Why the MFU change is missing or needs care, one line each."""
    out = []
    if e.reason:
        out.append(f"MFU n/a: {e.reason}")
    if e.caveat:
        out.append(e.caveat)
    return out


def _summary_rows(r: DiffResult) -> list[tuple[str, str, str, str]]:
    u = r.gpu_utilization
    return [
        ("step time (median)", _num(r.step_ms.before, 2, " ms"), _num(r.step_ms.after, 2, " ms"),
         f"{_signed(r.step_ms.delta, 2, ' ms')} ({_signed(r.step_ms.delta_pct, 1, '%')})"),
        ("step time (mean)", _num(r.step_ms_mean.before, 2, " ms"), _num(r.step_ms_mean.after, 2, " ms"),
         f"{_signed(r.step_ms_mean.delta, 2, ' ms')} ({_signed(r.step_ms_mean.delta_pct, 1, '%')})"),
        ("GPU utilization", _pct(u.before), _pct(u.after), _signed(None if u.delta is None else 100 * u.delta, 1, " pts")),
        ("sync points per step", _num(r.sync_points_per_step.before), _num(r.sync_points_per_step.after),
         _signed(r.sync_points_per_step.delta)),
        ("kernels per step", _num(r.kernels_per_step.before, 1), _num(r.kernels_per_step.after, 1), _signed(r.kernels_per_step.delta, 1)),
        ("median kernel", _num(r.median_kernel_us.before, 1, " µs"), _num(r.median_kernel_us.after, 1, " µs"),
         _signed(r.median_kernel_us.delta, 1, " µs")),
        *_efficiency_rows(r.efficiency),
    ]


def _status(status: str) -> str:
    return status.replace("_", " ")


def _shown_causes(r: DiffResult) -> list[Any]:
    return [c for c in r.causes if c.cause == "compute" or max(c.share.before or 0.0, c.share.after or 0.0) >= _MIN_SHARE]


def _short(name: str, width: int) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


# --------------------------------------------------------------------------- text


def render_diff_text(r: DiffResult) -> str:
    out = [f"tracekit diff · {diff_headline(r)}"]
    out.extend(f"  because {reason}" for reason in _reasons(r))
    if r.plan is not None:
        out.append(r.plan.sentence())
    for label, side in (("before", r.before), ("after", r.after)):
        out.append(f"  {label:<7} {side.path}")
        out.append(f"  {'':<7} {_describe(side)}")
    out.append("")
    out.append(f"  {'':<24} {'before':>12} {'after':>12}  delta")
    out.extend(f"  {name:<24} {b:>12} {a:>12}  {d}" for name, b, a, d in _summary_rows(r))
    out.extend(f"  {line}" for line in _efficiency_lines(r.efficiency))
    out.append("")
    out.append("Where the step time goes (ms per step)")
    out.append(f"  {'':<24} {'before':>12} {'after':>12}  delta")
    for c in _shown_causes(r):
        m = c.ms_per_step
        out.append(f"  {cause_label(c.cause):<24} {_num(m.before):>12} {_num(m.after):>12}  {_signed(m.delta)}")
    out.append("")
    if r.findings:
        out.append("Findings (ms per step)")
        for f in r.findings:
            m = f.ms_per_step
            line = f"  {_status(f.status):<10} {f.title} [{f.kind}]: {_num(m.before)} -> {_num(m.after)} ({_signed(m.delta)})"
            pb, pa = f.predicted_step_ms.before, f.predicted_step_ms.after
            if pb is not None or pa is not None:
                line += f"; predicted step if fixed {_num(pb)} -> {_num(pa)} ms"
            out.append(line)
    else:
        out.append("Findings: none before, none after.")
    out.append("")
    if r.kernels:
        out.append("Top kernels (ms per step; — = not among that trace's top kernels)")
        out.append(f"  {'before':>10} {'after':>10} {'delta':>10}  kernel")
        for k in r.kernels:
            m = k.ms_per_step
            out.append(f"  {_num(m.before):>10} {_num(m.after):>10} {_signed(m.delta):>10}  {_short(k.name, 80)}")
    if r.notes:
        out.append("")
        out.append("Notes")
        out.extend(f"  - {n}" for n in r.notes)
    return "\n".join(out).rstrip() + "\n"


# --------------------------------------------------------------------------- markdown


def render_diff_markdown(r: DiffResult) -> str:
    out = [f"## tracekit diff: {diff_headline(r)}", ""]
    if _reasons(r):
        out += [f"- because {reason}" for reason in _reasons(r)] + [""]
    if r.plan is not None:
        out += [f"**{r.plan.sentence()}**", ""]
    out += ["| | trace | what |", "|---|---|---|"]
    for label, side in (("before", r.before), ("after", r.after)):
        out.append(f"| {label} | `{side.path}` | {_describe(side)} |")
    out += ["", "| | before | after | delta |", "|---|---:|---:|---:|"]
    out.extend(f"| {name} | {b} | {a} | {d} |" for name, b, a, d in _summary_rows(r))
    if _efficiency_lines(r.efficiency):
        out += ["", *(f"- {line}" for line in _efficiency_lines(r.efficiency))]
    out += ["", "### Where the step time goes (ms per step)", "", "| cause | before | after | delta |", "|---|---:|---:|---:|"]
    for c in _shown_causes(r):
        m = c.ms_per_step
        out.append(f"| {cause_label(c.cause)} | {_num(m.before)} | {_num(m.after)} | {_signed(m.delta)} |")
    out += ["", "### Findings", ""]
    if r.findings:
        out += ["| status | finding | before ms/step | after ms/step | delta | predicted step if fixed (before → after) |",
                "|---|---|---:|---:|---:|---|"]
        for f in r.findings:
            m = f.ms_per_step
            pb, pa = f.predicted_step_ms.before, f.predicted_step_ms.after
            pred = "" if pb is None and pa is None else f"{_num(pb)} → {_num(pa)} ms"
            out.append(f"| **{_status(f.status)}** | {f.title} (`{f.kind}`) | {_num(m.before)} | {_num(m.after)} | {_signed(m.delta)} | {pred} |")
    else:
        out.append("No findings before or after.")
    if r.kernels:
        out += ["", "### Top kernels (ms per step)", "", "<details><summary>"
                f"{len(r.kernels)} kernels, largest first (— = not among that trace's top kernels)</summary>", "",
                "| kernel | before | after | delta |", "|---|---:|---:|---:|"]
        for k in r.kernels:
            m = k.ms_per_step
            out.append(f"| `{_short(k.name, 70)}` | {_num(m.before)} | {_num(m.after)} | {_signed(m.delta)} |")
        out += ["", "</details>"]
    if r.notes:
        out += ["", "### Notes", ""]
        out.extend(f"- {n}" for n in r.notes)
    out += ["", f"<sub>tracekit {__version__}</sub>"]
    return "\n".join(out).rstrip() + "\n"


# --------------------------------------------------------------------------- HTML


def diff_sections(r: DiffResult) -> list[str]:
    """The comparison as HTML sections: the verdict, the numbers side by side, the step-time breakdown
    before and after as two bars, the findings (with their status and fix) and the top kernels."""
    from html import escape

    from .html import folded
    from .svg import breakdown_svg

    def e(x: object) -> str:
        return escape(str(x), quote=True)

    sides = "".join(
        f'<p class="meta"><b>{label}</b> <span class="mono">{e(side.path)}</span> · {e(_describe(side))}</p>'
        for label, side in (("before", r.before), ("after", r.after))
    )
    check = "" if r.plan is None else f'<p class="answer">{e(r.plan.sentence())}</p>'
    parts = [f"<header><h1>tracekit diff: {e(diff_headline(r))}</h1>{check}{sides}</header>"]
    rows = "".join(
        f'<tr><td>{e(name)}</td><td class="n">{e(b)}</td><td class="n">{e(a)}</td><td class="n">{e(d)}</td></tr>'
        for name, b, a, d in _summary_rows(r)
    )
    eff_notes = "".join(f'<p class="caption">{e(line)}</p>' for line in _efficiency_lines(r.efficiency))
    parts.append('<section><h2>Side by side</h2><table><thead><tr><th></th><th class="n">before</th><th class="n">after</th>'
                 f'<th class="n">delta</th></tr></thead><tbody>{rows}</tbody></table>{eff_notes}</section>')
    bars = []
    for label in ("before", "after"):
        share = {c.cause: getattr(c.share, label) or 0.0 for c in r.causes}
        ms = {c.cause: getattr(c.ms_per_step, label) or 0.0 for c in r.causes}
        if any(share.values()):
            bars.append(f'<p class="caption"><b>{label}</b></p><div class="figure">{breakdown_svg(share, ms)}</div>')
    cause_rows = "".join(
        f'<tr><td>{e(cause_label(c.cause))}</td><td class="n">{_num(c.ms_per_step.before)}</td>'
        f'<td class="n">{_num(c.ms_per_step.after)}</td><td class="n">{_signed(c.ms_per_step.delta)}</td></tr>'
        for c in _shown_causes(r)
    )
    parts.append(
        "<section><h2>Where the step time goes <span class=\"muted\">(ms per step)</span></h2>" + "".join(bars)
        + '<table><thead><tr><th>cause</th><th class="n">before</th><th class="n">after</th><th class="n">delta</th></tr></thead>'
        f"<tbody>{cause_rows}</tbody></table></section>"
    )
    if r.findings:
        items = []
        for f in r.findings:
            m = f.ms_per_step
            pb, pa = f.predicted_step_ms.before, f.predicted_step_ms.after
            pred = "" if pb is None and pa is None else f"<p>Predicted step time if fixed: {_num(pb)} → {_num(pa)} ms</p>"
            color = {"fixed": "#54a24b", "better": "#54a24b", "new": "#e45756", "worse": "#e45756"}.get(f.status, "#999999")
            items.append(
                f'<div class="finding" style="border-left-color: {color}"><h3>{e(_status(f.status))}: {e(f.title)} '
                f'<span class="kind">{e(f.kind)}</span></h3><p class="cost">{_num(m.before)} → {_num(m.after)} ms per step '
                f"({_signed(m.delta)})</p>{pred}<p><b>Fix:</b> {e(f.fix)}</p></div>"
            )
        parts.append("<section><h2>Findings</h2>" + "".join(items) + "</section>")
    else:
        parts.append("<section><h2>Findings</h2><p>No findings before or after.</p></section>")
    if r.kernels:
        krows = "".join(
            f'<tr><td class="kernel mono" title="{e(k.name)}">{e(_short(k.name, 110))}</td><td class="n">{_num(k.ms_per_step.before)}</td>'
            f'<td class="n">{_num(k.ms_per_step.after)}</td><td class="n">{_signed(k.ms_per_step.delta)}</td></tr>'
            for k in r.kernels
        )
        parts.append(folded(
            f"Top kernels: {len(r.kernels)}, ms per step (— = not among that trace's top kernels)",
            ['<section><table><thead><tr><th>kernel</th><th class="n">before</th><th class="n">after</th><th class="n">delta</th>'
             f"</tr></thead><tbody>{krows}</tbody></table></section>"],
        ))
    if r.notes:
        parts.append("<section><h2>Notes</h2><ul>" + "".join(f"<li>{e(n)}</li>" for n in r.notes) + "</ul></section>")
    return parts


def render_diff_html(r: DiffResult) -> str:
    """The comparison as one self-contained HTML page (see :func:`diff_sections`)."""
    from .html import FOOTER, html_page

    return html_page(f"tracekit diff · {r.before.path} → {r.after.path}", [*diff_sections(r), FOOTER])


# --------------------------------------------------------------------------- registered renderings

def _diff_fragment(c: Comparison) -> str:
    from .html import html_fragment

    return html_fragment(diff_sections(c.diff))


# a comparison in every format (tracekit.report.registry)
register_document(Comparison, lambda c: diff_to_json_dict(c.diff))
register(Comparison, "text", lambda c: render_diff_text(c.diff))
register(Comparison, "markdown", lambda c: render_diff_markdown(c.diff))
register(Comparison, "html", lambda c: render_diff_html(c.diff))
register(Comparison, "fragment", _diff_fragment)


__all__ = ["DIFF_SCHEMA_VERSION", "diff_sections", "diff_to_json_dict", "render_diff_html", "render_diff_markdown", "render_diff_text"]
