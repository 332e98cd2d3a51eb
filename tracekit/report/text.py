"""Terminal text and Markdown renderings of a diagnosis (plain text, deterministic)."""

from __future__ import annotations

from typing import Any

import polars as pl

from ..analysis import Diagnosis
from ..analysis.causes import CAUSE_LABELS, CAUSES, PATH_LABELS
from ..analysis.view import StepView
from ..pipeline import FolderResult, JobResult, TraceResult
from .formatting import (
    ONE_STEP_BASIS,
    SPLIT_LABELS,
    evidence_text,
    finding_cost,
    fmt_ms,
    fmt_num,
    fmt_pct,
    headline,
    intermittent_prediction,
    job_evidence_text,
    job_label,
    job_lines,
    location_text,
    plan_lines,
)
from .json_report import to_json_dict
from .registry import register

BAR_WIDTH = 30


def _efficiency_text(data: dict[str, Any]) -> list[str]:
    """The roofline summary: the step split, each operator class and the top operators."""
    eff = data.get("efficiency") or {}
    if not eff.get("available"):
        return []
    out = []
    dev = eff["device"]
    peak = ""
    if dev["model"]:
        tf = dev["peak_tflops"]
        peak = f" on {dev['model']} (peak {tf.get(eff['mfu_dtype'] or 'bf16') or tf['bf16']} TFLOP/s {eff['mfu_dtype'] or 'bf16'}, {dev['memory_gbps']:,.0f} GB/s)"
    out.append(f"How well the busy time is used: roofline{peak}")
    if eff["split"]:
        out.append("  " + " · ".join(f"{SPLIT_LABELS[k]} {fmt_pct(v)}" for k, v in eff["split"].items()))
    out.append(f"  {'class':<12} {'ms':>10} {'TFLOP/s':>9} {'GB/s':>9} {'bound':<8} {'of attainable':>13}  share of GPU time")
    for c in eff["by_class"]:
        out.append(
            f"  {c['op_class']:<12} {c['gpu_ns'] / 1e6:>10,.2f} {fmt_num(c['tflops']):>9} {fmt_num(c['gbps'], 0):>9} "
            f"{c['bound'] or '?':<8} {fmt_pct(c['pct_of_attainable']):>13}  {fmt_pct(c['share_of_gpu_time'])}"
        )
    top = [o for o in eff["top_ops"] if o["op_class"] in ("gemm", "conv", "attention")][:5]
    if top:
        out.append("  Top matrix operators:")
        for o in top:
            out.append(
                f"    {o['gpu_ns'] / 1e6:>9,.2f} ms ×{o['calls']:<5} {o['name']} {o['shape']} {o['dtype'] or '?'}: "
                f"{fmt_num(o['tflops'])} TFLOP/s, {fmt_pct(o['pct_of_attainable'])} of attainable ({o['bound'] or '?'}-bound)"
            )
    out.append("")
    return out




def render_text(d: Diagnosis) -> str:
    data = to_json_dict(d)
    s = data["summary"]
    out = [f"tracekit · {data['trace']['path']}", *_answer(data), *headline(d, data), ""]
    plan = plan_lines(d.plan)
    if plan:
        out += ["Fix plan (in order; each step priced with the earlier ones applied)", *plan, ""]
    if s["breakdown"]:
        out.append("Where the step time goes (ms per step, share of step)")
        for cause in CAUSES:
            share = s["breakdown"].get(cause) or 0.0
            ms = s["breakdown_ms_per_step"].get(cause) or 0.0
            if share < 0.0005 and cause != "compute":
                continue
            bar = "█" * round(share * BAR_WIDTH)
            out.append(f"  {CAUSE_LABELS[cause]:<22} {ms:>10,.2f} ms {100 * share:6.1f}%  {bar}")
        out.append("")
    out.extend(_critical_path_text(data))
    out.extend(_efficiency_text(data))
    if d.findings:
        out.append("Findings (largest cost first)")
        for i, f in enumerate(d.findings, 1):
            out.append(f" {i}. {f.title} [{f.kind}]")
            out.append("    " + finding_cost(f))
            intermittent = intermittent_prediction(f)
            if intermittent:
                out.append("    " + intermittent)
            elif f.predicted_step_ms is not None:
                out.append(f"    predicted step time if fixed: {f.predicted_step_ms:,.2f} ms{_saving(s, f.predicted_step_ms)}")
            if f.modelled_fix:
                out.append(f"    fix modelled (replay): {f.modelled_fix}")
            ev = evidence_text(f)
            if ev:
                out.append(f"    evidence: {ev}")
            if f.location is not None:
                out.append(f"    at {location_text(f.location)}")
            out.append(f"    fix: {f.fix}")
        out.append("")
    elif s["gpu_utilization"] is not None:
        out.append("No findings: nothing costs 5% or more of the step time." if (s["gpu_utilization"] or 0) < 0.95 else "No findings: the GPU is busy; nothing to fix on the idle side.")
        out.append("")
    sp = data["sync_points"]
    if sp["count"]:
        top = sp["top"][0]
        where = f" in {top['op']}" if top["op"] else ""
        out.append(f"Sync points: {sp['count']} ({sp['per_step']} per step), blocked {sp['blocked_ms']:,.1f} ms; most: {top['api']}{where} ×{top['count']}")
    k = data["kernels"]
    if k["count"]:
        out.append(f"Kernels: {k['count']:,} ({k['time_ms']:,.1f} ms), median {k['median_us']} µs, {100 * (k['short_kernel_share'] or 0):.0f}% shorter than 10 µs")
        for r in k["top"][:5]:
            tc = {True: " [tensor cores]", False: " [fp32, no tensor cores]"}.get(r["tensor_cores"], "")
            out.append(f"  {r['total_ms']:>10,.2f} ms {100 * (r['share'] or 0):5.1f}%  ×{r['count']:<6} {_short(r['name'])}{tc}")
    if data["data_quality"] or data["warnings"]:
        out.append("")
        out.append("Notes")
        out.extend(f"  - {n}" for n in [*data["data_quality"], *data["warnings"]])
    return "\n".join(out).rstrip() + "\n"




def _answer(data: dict[str, Any]) -> list[str]:
    """The report's opening sentence (none without a step time)."""
    return [data["answer"]] if data.get("answer") else []


def _saving(summary: dict[str, Any], predicted_ms: float) -> str:
    # predictions are stated for the median step (analysis/steady.py): the saving is against it
    base = summary.get("step_ms_median")
    if base is None:
        return ""
    return f" (saves {base - predicted_ms:,.2f} ms per step)"


def _critical_path_text(data: dict[str, Any]) -> list[str]:
    cp = data.get("critical_path")
    if not cp or not cp["path_ms_per_step"]:
        return []
    out = ["What decides the step time: the critical path (ms per step, share of the path)"]
    for cause, ms in cp["breakdown_ms_per_step"].items():
        share = cp["breakdown"].get(cause) or 0.0
        if share < 0.0005:
            continue
        bar = "█" * round(share * BAR_WIDTH)
        out.append(f"  {PATH_LABELS.get(cause, cause):<22} {ms:>10,.2f} ms {100 * share:6.1f}%  {bar}")
    if cp["what_if"]:
        out.append("What if (predicted step time on the critical path)")
        for w in cp["what_if"]:
            if w["predicted_step_ms"] is None:
                continue
            out.append(f"  {w['label']:<40} {w['predicted_step_ms']:>10,.2f} ms (saves {w['saving_ms']:,.2f} ms per step)")
    out.append("")
    return out


def _critical_path_markdown(data: dict[str, Any]) -> list[str]:
    cp = data.get("critical_path")
    if not cp or not cp["path_ms_per_step"]:
        return []
    out = ["### What decides the step time (critical path)", "", "| cause | ms per step | share of the path |", "|---|---:|---:|"]
    for cause, ms in cp["breakdown_ms_per_step"].items():
        share = cp["breakdown"].get(cause) or 0.0
        if share >= 0.0005:
            out.append(f"| {PATH_LABELS.get(cause, cause)} | {ms:,.2f} | {100 * share:.1f}% |")
    out.append("")
    if cp["what_if"]:
        out += ["| what if | predicted step | saves |", "|---|---:|---:|"]
        for w in cp["what_if"]:
            if w["predicted_step_ms"] is not None:
                out.append(f"| `{w['label']}` | {w['predicted_step_ms']:,.2f} ms | {w['saving_ms']:,.2f} ms |")
        out.append("")
    return out


def _efficiency_markdown(data: dict[str, Any]) -> list[str]:
    eff = data.get("efficiency") or {}
    if not eff.get("available"):
        return []
    dev = eff["device"]
    out = ["### How well the busy time is used (roofline)", ""]
    if dev["model"]:
        out += [f"Device: {dev['model']} (peaks: " + ", ".join(f"{k} {v} TFLOP/s" for k, v in dev["peak_tflops"].items() if v)
                + f"; {dev['memory_gbps']:,.0f} GB/s).", ""]
    if eff["split"]:
        out += [" · ".join(f"{SPLIT_LABELS[k]} {fmt_pct(v)}" for k, v in eff["split"].items()), ""]
    out += ["| class | ms | TFLOP/s | GB/s | bound | of attainable | share of GPU time |", "|---|---:|---:|---:|---|---:|---:|"]
    for c in eff["by_class"]:
        out.append(f"| {c['op_class']} | {c['gpu_ns'] / 1e6:,.2f} | {fmt_num(c['tflops'])} | {fmt_num(c['gbps'], 0)} | "
                   f"{c['bound'] or '?'} | {fmt_pct(c['pct_of_attainable'])} | {fmt_pct(c['share_of_gpu_time'])} |")
    out.append("")
    if eff["top_ops"]:
        out += ["<details><summary>Top operators by GPU time</summary>", "",
                "| operator | shape | dtype | calls | ms | TFLOP/s | GB/s | bound | of attainable |",
                "|---|---|---|---:|---:|---:|---:|---|---:|"]
        for o in eff["top_ops"][:10]:
            out.append(f"| `{_cell(o['name'])}` | {_cell(o['shape'] or '')} | {o['dtype'] or '?'} | {o['calls']} | "
                       f"{o['gpu_ns'] / 1e6:,.2f} | {fmt_num(o['tflops'])} | {fmt_num(o['gbps'], 0)} | {o['bound'] or '?'} | "
                       f"{fmt_pct(o['pct_of_attainable'])} |")
        out += ["", "</details>", ""]
    return out


def _short(name: str, width: int = 80) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _cell(text: object) -> str:
    """Text safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_section(title: str, intro: str, head: str, align: str, rows: list[str]) -> list[str]:
    """A Markdown report section: its heading, one paragraph, then a table."""
    return [f"### {title}", "", intro, "", head, align, *rows, ""]


def render_markdown(d: Diagnosis, view: StepView | None = None, image: str | None = None) -> str:
    """The report for a pull-request comment: the HTML report's content as tables.

    ``view`` (the representative step, built by the caller) adds the timeline section;
    ``image`` links a picture (e.g. an uploaded screenshot of the HTML report) under the title.
    """
    data = to_json_dict(d)
    s = data["summary"]
    out = [f"## tracekit diagnosis: `{data['trace']['path']}`", ""]
    if data.get("answer"):
        out += [f"**{data['answer']}**", ""]
    out.extend(f"{line}  " for line in headline(d, data))
    out.append("")
    if image:
        out += [f"![tracekit report]({image})", ""]
    out += _plan_markdown(d)
    if s["breakdown"]:
        out += ["### Where the step time goes", "", "| cause | ms per step | share |", "|---|---:|---:|"]
        for cause in CAUSES:
            share = s["breakdown"].get(cause) or 0.0
            if share < 0.0005 and cause != "compute":
                continue
            out.append(f"| {CAUSE_LABELS[cause]} | {s['breakdown_ms_per_step'][cause]:,.2f} | {100 * share:.1f}% |")
        out.append("")
    if data["steps"]:
        out += ["<details><summary>Step time and GPU utilization per step</summary>", "",
                "| rank | step | ms | GPU busy | complete |", "|---:|---:|---:|---:|---|"]
        for st in data["steps"]:
            out.append(f"| {st['rank']} | {st['step']} | {st['dur_ns'] / 1e6:,.2f} | {fmt_pct(st['utilization'])} | "
                       f"{'yes' if st['complete'] else 'no (partial)'} |")
        out += ["", "</details>", ""]
    if view is not None:
        out += _markdown_view(d, view)
    out += _critical_path_markdown(data)
    out += _efficiency_markdown(data)
    out += ["### Findings", ""]
    if d.findings:
        out += ["| # | finding | ms per step | share | predicted step if fixed |", "|---:|---|---:|---:|---:|"]
        for i, f in enumerate(d.findings, 1):
            pred = "" if f.predicted_step_ms is None else f"{f.predicted_step_ms:,.2f} ms"
            out.append(f"| {i} | **{f.title}** (`{f.kind}`) | {f.ms_per_step:,.2f} | {100 * f.share_of_step:.1f}% | {pred} |")
        out.append("")
        for i, f in enumerate(d.findings, 1):
            where = f" In {f.steps_affected} steps" + (
                f" (worst: {', '.join(str(x) for x in f.worst_steps)})." if f.worst_steps else "."
            )
            modelled = f" Fix modelled (replay): {f.modelled_fix}." if f.modelled_fix else ""
            at = "" if f.location is None else f" At `{_cell(location_text(f.location))}`."
            out.append(f"{i}. **{f.title}**.{where} Evidence: {evidence_text(f) or 'see JSON report'}.{at} Fix: {f.fix}{modelled}")
        out.append("")
    else:
        out += ["No findings.", ""]
    sp = data["sync_points"]
    if sp["count"]:
        out += _md_section(
            "Sync points",
            f"{sp['count']} sync points ({sp['per_step']} per step, {sp['explicit']} from explicit sync events); "
            f"the host was blocked {sp['blocked_ms']:,.1f} ms in them.",
            "| call | operator | kind | count | blocked ms |", "|---|---|---|---:|---:|",
            [f"| `{_cell(t['api'])}` | {('`' + _cell(t['op']) + '`') if t['op'] else ''} | {t['sync_kind'] or ''} | "
             f"{t['count']} | {t['blocked_ms']:,.3f} |" for t in sp["top"]],
        )
    k = data["kernels"]
    if k["top"]:
        tensor_cores = {True: "yes", False: "no (fp32)"}
        out += _md_section(
            "Top kernels",
            f"{k['count']:,} kernels, {k['time_ms']:,.1f} ms in all; median {k['median_us']} µs; "
            f"{100 * (k['short_kernel_share'] or 0):.0f}% shorter than 10 µs.",
            "| kernel | category | count | total ms | share | tensor cores |", "|---|---|---:|---:|---:|---|",
            [f"| `{_cell(_short(r['name'], 70))}` | {r['category']} | {r['count']} | {r['total_ms']:,.2f} | "
             f"{100 * (r['share'] or 0):.1f}% | {tensor_cores.get(r['tensor_cores'], '?')} |" for r in k["top"][:10]],
        )
    mem = [m for m in data["memory"] if m["peak_reserved_bytes"] or m["peak_allocated_bytes"]]
    if mem:
        out += ["### Device memory", "", "| device | peak allocated | peak reserved | total | unused at peak |",
                "|---:|---:|---:|---:|---:|"]
        for m in mem:
            out.append(f"| {m['device']} | {_gib(m['peak_allocated_bytes'])} | {_gib(m['peak_reserved_bytes'])} | "
                       f"{_gib(m['total_bytes'])} | {fmt_pct(m['headroom'])} |")
        out.append("")
    if data["data_quality"] or data["warnings"]:
        out += ["### Notes", ""]
        out.extend(f"- {n}" for n in [*data["data_quality"], *data["warnings"]])
        out.append("")
    out.append(f"<sub>tracekit {data['tracekit_version']}</sub>")
    return "\n".join(out).rstrip() + "\n"


def _plan_markdown(d: Diagnosis) -> list[str]:
    """The fix plan as a table: each step with the earlier ones applied."""
    plan = d.plan
    if not plan.steps:
        return ["### Fix plan", "", plan.note, ""] if plan.note else []
    out = ["### Fix plan", "", "Each step is priced with the earlier ones applied (replay).", "",
           "| # | fix | step after | saves | GPU busy after | instead (same saving) |", "|---:|---|---:|---:|---:|---|"]
    for i, st in enumerate(plan.steps, 1):
        loc = location_text(st.location)
        where = f" at `{_cell(loc)}`" if loc else ""
        alts = ", ".join(f"`{a}`" for a in st.alternatives)
        out.append(f"| {i} | {_cell(st.action)} (`{st.kind}`){where} | {st.predicted_step_ms:,.2f} ms | {st.saves_ms:,.2f} ms | "
                   f"{fmt_pct(st.gpu_utilization)} | {alts} |")
    out.append("")
    if plan.bound is not None:
        out += [f"Then the step is bound by {plan.bound.text}.", ""]
    return out


def _gib(b: int | None) -> str:
    return "n/a" if b is None else f"{b / 2**30:,.2f} GiB"


def _markdown_view(d: Diagnosis, view: StepView) -> list[str]:
    """The timeline section in words: the representative step's idle time, sync points, critical path."""
    out = [f"### Timeline of step {view.step} (rank {view.rank})", "",
           f"The complete step closest to the median: {(view.end_ns - view.start_ns) / 1e6:,.2f} ms, "
           f"{view.tracks.filter(pl.col('side') == 'cpu').height} CPU thread(s), "
           f"{view.tracks.filter(pl.col('side') == 'gpu').height} GPU stream(s).", ""]
    device = d.timeline.primary_device.get(view.rank)
    row = d.timeline.per_step.filter(
        (pl.col("rank") == view.rank) & (pl.col("device") == (-1 if device is None else device)) & (pl.col("step") == view.step)
    )
    if row.height:
        r = row.row(0, named=True)
        idle = [(c, r[f"{c}_ns"] / 1e6) for c in CAUSES if c != "compute" and r[f"{c}_ns"] > 0]
        if idle:
            out += [f"| GPU {device} idle in this step | ms |", "|---|---:|"]
            out.extend(f"| {CAUSE_LABELS[c]} | {ms:,.3f} |" for c, ms in idle)
            out.append("")
    gaps = view.gaps.sort(["start_ns", "device"])
    if gaps.height:
        longest = view.gaps.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("_d")).sort(
            ["_d", "start_ns", "device"], descending=[True, False, False]
        ).head(5)
        out += ["Longest idle gaps: " + "; ".join(
            f"{g['_d'] / 1e6:,.3f} ms {CAUSE_LABELS.get(str(g['cause']), str(g['cause']))} "
            f"at +{(g['start_ns'] - view.start_ns) / 1e6:,.3f} ms"
            for g in longest.iter_rows(named=True)
        ) + ".", ""]
    if view.syncs.height:
        out += ["| sync point | operator | at (ms from step start) | blocked ms |", "|---|---|---:|---:|"]
        for sy in view.syncs.sort(["start_ns", "tid"]).head(20).iter_rows(named=True):
            op = f"`{_cell(sy['op'])}`" if sy["op"] else ""
            out.append(f"| `{_cell(sy['api'])}` | {op} | {(sy['start_ns'] - view.start_ns) / 1e6:,.3f} | {(sy['dur_ns'] or 0) / 1e6:,.3f} |")
        if view.syncs.height > 20:
            out.append(f"| … {view.syncs.height - 20} more | | | |")
        out.append("")
    cp = getattr(d, "critical_path", None)
    segments = getattr(cp, "segments", None) if cp is not None else None
    if segments is None:
        out += ["Critical path not computed.", ""]
    else:
        seg = segments.filter((pl.col("rank") == view.rank) & (pl.col("step") == view.step))
        if seg.height == 0:
            out += ["Critical path: no segments in this step.", ""]
        else:
            top = seg.sort(["dur_ns", "seq"], descending=[True, False]).head(10)
            out += [f"Critical path: {seg.height} segments; the longest:", "",
                    "| # | track | edge | cause | ms |", "|---:|---|---|---|---:|"]
            for c in top.iter_rows(named=True):
                inferred = " (inferred)" if c.get("inferred") else ""
                out.append(f"| {c['seq']} | {c['track'] or ''} | {c['edge_kind'] or ''}{inferred} | {c['cause'] or ''} | "
                           f"{c['dur_ns'] / 1e6:,.3f} |")
            out.append("")
    return out


def render_job_text(jd: Any, *, rank_details: int = 4) -> str:
    """Terminal text for a job: per-rank table, the comparison across ranks, and each rank's report
    (when there are at most ``rank_details`` ranks)."""
    head, data = job_lines(jd)
    j = data["job"]
    out = [*head, ""]
    out.append("Ranks (ms per step; * straggler)")
    out.append(f"  {'rank':>5} {'steps':>5} {'step':>10} {'GPU util':>8} {'compute':>9} {'exposed comm':>12} {'late':>8} {'wait':>8}  top finding · file")
    for r in j["per_rank"]:
        mark = "*" if r["straggler"] else " "
        util = fmt_pct(r["gpu_utilization"])

        def num(x: float | None) -> str:
            return "n/a" if x is None else f"{x:,.2f}"

        out.append(
            f"  {r['rank']:>4}{mark} {r['steps']:>5} {num(r['step_ms_median']):>10} {util:>8} {num(r['compute_ms']):>9} "
            f"{num(r['exposed_communication_ms']):>12} {num(r['late_ms']):>8} {num(r['wait_ms']):>8}  "
            f"{r['top_finding'] or '-'} · {_short(str(r['path']).rsplit('/', 1)[-1], 50)}"
        )
    out += ["", "Across ranks"]
    if len(j["ranks"]) < 2:
        out.append("  one rank only: nothing to compare")
    else:
        if j["stragglers"]:
            out.append(f"  stragglers: rank {', '.join(str(r) for r in j['stragglers'])} — the others wait up to "
                       f"{j['straggle_ms_per_step'] or 0:,.2f} ms per step ({'at collectives' if j['straggler_basis'] == 'collective_start' else 'at step starts'})")
        else:
            out.append("  stragglers: none")
        if j["imbalance"] is not None:
            out.append(f"  load imbalance: {100 * j['imbalance']:.1f}% (compute spread {j['compute_spread_ms'] or 0:,.2f} ms per step)")
        if j["exposed_communication_ms"] is not None:
            out.append(f"  exposed communication: {j['exposed_communication_ms']:,.2f} ms per step on average"
                       + (f", {j['wait_ms']:,.2f} ms of it waiting for late ranks" if j["wait_ms"] else ""))
    out.append("")
    out += _job_model_text(j.get("model"))
    if j["findings"]:
        out.append("Findings across ranks (largest saving of the job step first)")
        for i, f in enumerate(jd.multirank.findings, 1):
            out.append(f" {i}. {f.title} [{f.kind}]")
            out.append("    " + finding_cost(f, steps=False)
                       + (f"; fixed, the job step would be {fmt_ms(f.predicted_step_ms)}" if f.predicted_step_ms is not None else ""))
            out.append(f"    evidence: {job_evidence_text(f)}")
            out.append(f"    fix: {f.fix}")
        out.append("")
    notes = [*j["notes"], *(f"skipped {s['path']}: {s['reason']}" for s in j["skipped"])]
    if notes:
        out.append("Notes")
        out.extend(f"  - {n}" for n in notes)
        out.append("")
    if len(jd.diagnoses) <= rank_details:
        for rank in sorted(jd.diagnoses):
            out += [f"── rank {rank} " + "─" * 60, render_text(jd.diagnoses[rank]).rstrip(), ""]
    else:
        out.append(f"({len(jd.diagnoses)} ranks: each rank's full report is in --format json, key `ranks`)")
    return "\n".join(out).rstrip() + "\n"


def _who(rank: int | None) -> str:
    return "collectives" if rank is None else f"rank {rank}"


def _clock_line(m: dict[str, Any]) -> str:
    offs = [c for c in m["clocks"] if c["clock_offset_ms"] is not None]
    if len(m["ranks"]) < 2:
        return "one rank present: there is nothing to join it with"
    if not offs:
        return "clocks: not aligned (no collective matched across ranks)"
    shifted = [c for c in offs if abs(c["clock_offset_ms"]) >= 0.001]
    what = ", ".join(f"rank {c['rank']} {c['clock_offset_ms']:+,.3f} ms" for c in shifted[:8]) if shifted else "no offset between ranks"
    how = f" (matched by {m['matching']})" if m.get("matching") else ""
    return (f"clocks aligned on the ends of {m['matched_collectives']} collectives{how}: {what}; "
            f"residual {m['clock_residual_us'] or 0:,.1f} µs")


def _job_model_text(m: dict[str, Any] | None) -> list[str]:
    """The job model's section of the text report (empty when there is none)."""
    if m is None:
        return []
    out = ["Job as one system (ranks joined at their collectives)", f"  {_clock_line(m)}"]
    if m["step_ms"] is None:
        out += [f"  {n}" for n in m["notes"]] + [""]
        return out
    err = f" (replay within {100 * m['replay_error']:.1f}%)" if m["replay_error"] is not None else ""
    basis = ONE_STEP_BASIS if m["step_basis"] == "one_step" else f"between the last collectives of consecutive steps, over {m['steps']} steps"
    out.append(f"  job step {fmt_ms(m['step_ms'])} {basis}{err}")
    path = m["critical_path"]
    if path:
        parts = ", ".join(f"{_who(p['rank'])} {p['cause']} {p['ms_per_step']:,.2f} ms" for p in path[:5])
        out.append(f"  cross-rank critical path per step: {parts}")
    waits = [w for w in m["waits"] if (w["wait_ms_per_step"] or 0) > 0]
    if waits:
        out.append("  waiting at collectives per step: " + "; ".join(
            f"rank {w['rank']} {w['wait_ms_per_step']:,.2f} ms" + (f" (mostly for rank {w['waits_for']})" if w["waits_for"] is not None else "")
            for w in waits[:8]))
    if m["what_ifs"]:
        out.append("  what-ifs for the job (largest saving first):")
        for w in m["what_ifs"][:8]:
            out.append(f"    {w['question']}: job step {fmt_ms(w['predicted_step_ms'])} (saves {w['saving_ms']:,.2f} ms)")
    out += [f"  note: {n}" for n in m["notes"]]
    out.append("")
    return out


def _job_model_markdown(m: dict[str, Any] | None) -> list[str]:
    if m is None:
        return []
    out = ["### The job as one system", "", _clock_line(m).capitalize() + ".", ""]
    if m["step_ms"] is not None:
        err = f" (the replay reproduces it within {100 * m['replay_error']:.1f}%)" if m["replay_error"] is not None else ""
        basis = f" ({ONE_STEP_BASIS})" if m["step_basis"] == "one_step" else ""
        out += [f"Job step: {fmt_ms(m['step_ms'])}{basis}{err}.", ""]
        if m["critical_path"]:
            out += ["| on the cross-rank critical path | cause | ms per step | share |", "|---|---|---:|---:|"]
            out += [f"| {_who(p['rank'])} | {p['cause']} | {p['ms_per_step']:,.2f} | {fmt_pct(p['share'])} |" for p in m["critical_path"][:8]]
            out.append("")
        if m["waits"]:
            out += ["| rank | waits at collectives, ms per step | mostly for |", "|---:|---:|---|"]
            out += [f"| {w['rank']} | {w['wait_ms_per_step']:,.2f} | {'' if w['waits_for'] is None else 'rank ' + str(w['waits_for'])} |" for w in m["waits"]]
            out.append("")
        if m["what_ifs"]:
            out += ["| what if | job step | saves ms |", "|---|---:|---:|"]
            out += [f"| {_cell(w['question'])} | {fmt_ms(w['predicted_step_ms'])} | {w['saving_ms']:,.2f} |" for w in m["what_ifs"][:10]]
            out.append("")
    out += [f"- {n}" for n in m["notes"]]
    if m["notes"]:
        out.append("")
    return out


def render_job_markdown(jd: Any) -> str:
    """Markdown for a job: the per-rank table and the findings across ranks."""
    head, data = job_lines(jd)
    j = data["job"]
    out = [f"## tracekit diagnosis: job `{j['name']}`", "", f"{head[1]}  ", ""]
    out += ["| rank | steps | step ms | GPU util | compute ms | exposed comm ms | late ms | wait ms | top finding |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in j["per_rank"]:
        cells = [f"**{r['rank']}** (straggler)" if r["straggler"] else str(r["rank"]), str(r["steps"])]
        for key in ("step_ms_median", "gpu_utilization", "compute_ms", "exposed_communication_ms", "late_ms", "wait_ms"):
            v = r[key]
            cells.append("n/a" if v is None else (fmt_pct(v) if key == "gpu_utilization" else f"{v:,.2f}"))
        cells.append(f"`{r['top_finding']}`" if r["top_finding"] else "")
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    out += _job_model_markdown(j.get("model"))
    if jd.multirank.findings:
        out += ["### Findings across ranks", ""]
        for i, f in enumerate(jd.multirank.findings, 1):
            predicted = f" Fixed, the job step would be {fmt_ms(f.predicted_step_ms)}." if f.predicted_step_ms is not None else ""
            out.append(f"{i}. **{f.title}** (`{f.kind}`): {f.ms_per_step:,.2f} ms per step ({100 * f.share_of_step:.1f}%).{predicted} "
                       f"Evidence: {_cell(job_evidence_text(f))}. Fix: {f.fix}")
        out.append("")
    elif len(j["ranks"]) > 1:
        out += ["No findings across ranks: no straggler, imbalance or exposed communication costs 5% of the step.", ""]
    if j["notes"]:
        out += ["### Notes", ""]
        out.extend(f"- {n}" for n in j["notes"])
        out.append("")
    return "\n".join(out).rstrip() + "\n"


# --------------------------------------------------------------------------- several jobs


def _jobs_table(folder: str, jobs: list[dict[str, Any]]) -> list[tuple[str, str, str, str, str, str]]:
    """(job, ranks, steps, step ms, GPU util, largest finding) per job, from job_to_json_dict documents."""
    rows = []
    for data in jobs:
        j, s = data["job"], data["summary"]
        top = (j["findings"] or data["findings"] or [None])[0]
        finding = "-" if top is None else f"{top['kind']} ({top['ms_per_step']:,.2f} ms)"
        step = j["step_ms_median"] if len(j["ranks"]) > 1 else s["step_ms_median"]
        rows.append((job_label(folder, j["name"]), str(len(j["ranks"])), str(s["complete_steps"]),
                     "n/a" if step is None else f"{step:,.2f}", fmt_pct(s["gpu_utilization"]), finding))
    return rows


def render_jobs_text(folder: str, jds: list[Any], skipped: list[tuple[str, str]] | None = None) -> str:
    """Terminal text for the jobs of one folder: a table with one row per job, then one short summary
    per job (its headline and findings with their fixes; for a job of ranks, the comparison across
    ranks and each rank's largest finding)."""
    from .json_report import job_to_json_dict

    docs = [job_to_json_dict(jd) for jd in jds]
    out = [f"tracekit · folder {folder} · {len(jds)} job{'s' if len(jds) != 1 else ''}", ""]
    table = _jobs_table(folder, docs)
    width = max([len(r[0]) for r in table] + [3])
    width = min(width, 60)
    out.append(f"  {'job':<{width}} {'ranks':>5} {'steps':>5} {'step ms':>10} {'GPU util':>8}  largest finding (ms per step)")
    out.extend(f"  {_short(job, width):<{width}} {r:>5} {st:>5} {ms:>10} {u:>8}  {top}" for job, r, st, ms, u, top in table)
    out.append("")
    for jd, data in zip(jds, docs, strict=True):
        j = data["job"]
        out.append(f"── {job_label(folder, j['name'])} " + "─" * 40)
        if len(jd.diagnoses) == 1:
            d = next(iter(jd.diagnoses.values()))
            out.extend(headline(d, data))
            findings = list(d.findings)
        else:
            head, _ = job_lines(jd)
            out.append(head[1])
            if j["stragglers"]:
                out.append(f"stragglers: rank {', '.join(str(r) for r in j['stragglers'])} (the others wait up to "
                           f"{j['straggle_ms_per_step'] or 0:,.2f} ms per step)")
            if j["imbalance"] is not None:
                out.append(f"load imbalance: {100 * j['imbalance']:.1f}% (compute spread {j['compute_spread_ms'] or 0:,.2f} ms per step)")
            findings = list(jd.multirank.findings)
            for r in j["per_rank"]:
                out.append(f"rank {r['rank']}: step {fmt_ms(r['step_ms_median'])}, GPU utilization {fmt_pct(r['gpu_utilization'])}, "
                           f"largest finding {r['top_finding'] or 'none'}")
        for i, f in enumerate(findings, 1):
            line = f" {i}. {f.title} [{f.kind}]: {f.ms_per_step:,.2f} ms per step ({100 * f.share_of_step:.1f}%)"
            if f.predicted_step_ms is not None:
                line += f"; {f.predicted_step_ms:,.2f} ms per step if fixed"
            out.append(line)
            if f.location is not None:
                out.append(f"    at {location_text(f.location)}")
            out.append(f"    fix: {f.fix}")
        if not findings:
            out.append("no findings" + (" across ranks" if len(jd.diagnoses) > 1 else ""))
        out.append("")
    if skipped:
        out.append(f"Skipped {len(skipped)} file(s) that are not traces tracekit reads:")
        out.extend(f"  - {p.rsplit('/', 1)[-1]}: {_short(reason, 100)}" for p, reason in skipped)
        out.append("")
    out.append("One job's full report: tracekit analyze FILE (one trace) or a folder holding only that job's files.")
    return "\n".join(out).rstrip() + "\n"


def render_jobs_markdown(folder: str, jds: list[Any], skipped: list[tuple[str, str]] | None = None) -> str:
    """Markdown for the jobs of one folder: the table of jobs and each job's findings."""
    from .json_report import job_to_json_dict

    docs = [job_to_json_dict(jd) for jd in jds]
    out = [f"## tracekit diagnosis: {len(jds)} job{'s' if len(jds) != 1 else ''} in `{folder}`", ""]
    out += ["| job | ranks | steps | step ms | GPU util | largest finding (ms per step) |", "|---|---:|---:|---:|---:|---|"]
    out.extend(f"| `{_cell(job)}` | {r} | {st} | {ms} | {u} | {_cell(top)} |" for job, r, st, ms, u, top in _jobs_table(folder, docs))
    out.append("")
    for jd, data in zip(jds, docs, strict=True):
        out += [f"### `{_cell(job_label(folder, data['job']['name']))}`", ""]
        if len(jd.diagnoses) == 1:
            d = next(iter(jd.diagnoses.values()))
            out += [f"{line}  " for line in headline(d, data)]
            findings = list(d.findings)
        else:
            out.append(job_lines(jd)[0][1] + "  ")
            findings = list(jd.multirank.findings)
        out.append("")
        for i, f in enumerate(findings, 1):
            pred = f"; {f.predicted_step_ms:,.2f} ms per step if fixed" if f.predicted_step_ms is not None else ""
            at = "" if f.location is None else f"At `{_cell(location_text(f.location))}`. "
            out.append(f"{i}. **{f.title}** (`{f.kind}`): {f.ms_per_step:,.2f} ms per step ({100 * f.share_of_step:.1f}%){pred}. "
                       f"{at}Fix: {f.fix}")
        if not findings:
            out.append("No findings.")
        out.append("")
    if skipped:
        out += [f"<details><summary>Skipped {len(skipped)} file(s) that are not traces tracekit reads</summary>", ""]
        out.extend(f"- `{p.rsplit('/', 1)[-1]}`: {_cell(reason)}" for p, reason in skipped)
        out += ["", "</details>", ""]
    return "\n".join(out).rstrip() + "\n"


# --------------------------------------------------------------------------- registered renderings

# the pipeline's results as text and Markdown (tracekit.report.registry)
register(TraceResult, "text", lambda r: render_text(r.diagnosis))
register(TraceResult, "markdown", lambda r, image=None: render_markdown(r.diagnosis, view=r.view(), image=image), options=("image",))
register(JobResult, "text", lambda r: render_job_text(r.job_diagnosis))
register(JobResult, "markdown", lambda r: render_job_markdown(r.job_diagnosis))
register(FolderResult, "text", lambda r: render_jobs_text(r.folder, r.job_diagnoses, list(r.skipped)))
register(FolderResult, "markdown", lambda r: render_jobs_markdown(r.folder, r.job_diagnoses, list(r.skipped)))
