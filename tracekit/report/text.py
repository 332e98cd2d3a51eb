"""Terminal text and Markdown renderings of a diagnosis (plain text, deterministic)."""

from __future__ import annotations

from typing import Any

from ..analysis import CAUSES, Diagnosis
from ..analysis.findings import Finding
from .json_report import to_json_dict

BAR_WIDTH = 30

CAUSE_LABELS = {
    "compute": "GPU compute",
    "data_loading": "data loading",
    "host_device_sync": "host-device sync",
    "pageable_memcpy": "pageable copies",
    "launch_bound": "launch overhead",
    "allocator": "allocator",
    "exposed_communication": "exposed communication",
    "cpu_bound": "other host work",
    "unattributed": "unattributed idle",
}


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.2f} ms"


def _headline(d: Diagnosis, data: dict[str, Any]) -> list[str]:
    t, s = data["trace"], data["summary"]
    parts = [t["format"] + (f" {t['format_version']}" if t["format_version"] else "")]
    if t["world_size"]:
        parts.append(f"rank {t['rank']}/{t['world_size']}")
    names = sorted({dev["name"] for dev in t["devices"] if dev["name"]})
    if names:
        parts.append(", ".join(names))
    steps = f"{s['complete_steps']} steps" + (f" (from {s['step_source']})" if s["step_source"] else "")
    parts.append(steps)
    lines = [" · ".join(parts)]
    lines.append(f"step time {_ms(s['step_ms_median'])} (median) · GPU utilization {_pct(s['gpu_utilization'])}")
    return lines


def _evidence_text(f: Finding) -> str:
    ev = f.evidence
    bits: list[str] = []
    if f.kind == "data_loading":
        for r in ev.get("ranges", [])[:2]:
            bits.append(f"{r['name']} ×{r['count']} ({r['total_ms']:,.1f} ms)")
        if ev.get("single_process_dataloader"):
            bits.append("single-process DataLoader (num_workers=0)")
    elif f.kind == "host_device_sync":
        for c in ev.get("sync_calls", [])[:3]:
            where = f" in {c['op']}" if c.get("op") else ""
            bits.append(f"{c['api']}{where} ×{c['count']} (blocked {c['blocked_ms']:,.1f} ms)")
        if ev.get("python_frames"):
            bits.append("from " + "; ".join(ev["python_frames"][:2]))
    elif f.kind == "pageable_memcpy":
        bits.append(f"{ev.get('pageable_copies', 0)} copies, {ev.get('pageable_bytes', 0) / 2**20:,.1f} MiB from/to pageable memory")
    elif f.kind in ("launch_bound", "small_batch"):
        if ev.get("median_kernel_us") is not None:
            bits.append(f"median kernel {ev['median_kernel_us']} µs")
        if ev.get("kernels_per_step") is not None:
            bits.append(f"{ev['kernels_per_step']} kernels per step")
        if ev.get("memory_headroom") is not None:
            bits.append(f"{100 * ev['memory_headroom']:.0f}% of device memory unused at peak")
    elif f.kind == "exposed_communication":
        bits.extend(ev.get("communication_kernels", [])[:2])
    elif f.kind == "no_tensor_cores":
        bits.extend(ev.get("fp32_matmul_kernels", [])[:2])
    elif f.kind == "allocator":
        bits.extend(f"{c['api']} ×{c['count']}" for c in ev.get("calls", []))
    elif f.kind == "cpu_bound":
        bits.extend(f"{o['name']} ({o['ms_in_gaps']:,.1f} ms)" for o in ev.get("top_host_ops", [])[:3])
    if ev.get("largest_gap"):
        g = ev["largest_gap"]
        bits.append(f"largest gap {g['dur_ms']:,.2f} ms in step {g['step']}")
    return "; ".join(bits)


def render_text(d: Diagnosis) -> str:
    data = to_json_dict(d)
    s = data["summary"]
    out = [f"tracekit · {data['trace']['path']}", *_headline(d, data), ""]
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
    if d.findings:
        out.append("Findings (largest cost first)")
        for i, f in enumerate(d.findings, 1):
            out.append(f" {i}. {f.title} [{f.kind}]")
            cost = f"    {f.ms_per_step:,.2f} ms per step ({100 * f.share_of_step:.1f}% of the step) in {f.steps_affected} steps"
            if f.worst_steps:
                cost += "; worst steps " + ", ".join(str(x) for x in f.worst_steps)
            out.append(cost)
            if f.predicted_step_ms is not None:
                out.append(f"    predicted step time if fixed: {f.predicted_step_ms:,.2f} ms")
            ev = _evidence_text(f)
            if ev:
                out.append(f"    evidence: {ev}")
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


def _short(name: str, width: int = 80) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def render_markdown(d: Diagnosis) -> str:
    data = to_json_dict(d)
    s = data["summary"]
    out = [f"## tracekit diagnosis: `{data['trace']['path']}`", ""]
    out.extend(f"{line}  " for line in _headline(d, data))
    out.append("")
    if s["breakdown"]:
        out += ["### Where the step time goes", "", "| cause | ms per step | share |", "|---|---:|---:|"]
        for cause in CAUSES:
            share = s["breakdown"].get(cause) or 0.0
            if share < 0.0005 and cause != "compute":
                continue
            out.append(f"| {CAUSE_LABELS[cause]} | {s['breakdown_ms_per_step'][cause]:,.2f} | {100 * share:.1f}% |")
        out.append("")
    out += ["### Findings", ""]
    if d.findings:
        out += ["| # | finding | ms per step | share | predicted step if fixed |", "|---:|---|---:|---:|---:|"]
        for i, f in enumerate(d.findings, 1):
            pred = "" if f.predicted_step_ms is None else f"{f.predicted_step_ms:,.2f} ms"
            out.append(f"| {i} | **{f.title}** (`{f.kind}`) | {f.ms_per_step:,.2f} | {100 * f.share_of_step:.1f}% | {pred} |")
        out.append("")
        for i, f in enumerate(d.findings, 1):
            out.append(f"{i}. **{f.title}**. Evidence: {_evidence_text(f) or 'see JSON report'}. Fix: {f.fix}")
        out.append("")
    else:
        out += ["No findings.", ""]
    k = data["kernels"]
    if k["top"]:
        out += ["### Top kernels", "", "| kernel | count | total ms | share | tensor cores |", "|---|---:|---:|---:|---|"]
        for r in k["top"][:10]:
            tc = {True: "yes", False: "no (fp32)"}.get(r["tensor_cores"], "?")
            out.append(f"| `{_short(r['name'], 70)}` | {r['count']} | {r['total_ms']:,.2f} | {100 * (r['share'] or 0):.1f}% | {tc} |")
        out.append("")
    if data["data_quality"] or data["warnings"]:
        out += ["### Notes", ""]
        out.extend(f"- {n}" for n in [*data["data_quality"], *data["warnings"]])
        out.append("")
    return "\n".join(out).rstrip() + "\n"
