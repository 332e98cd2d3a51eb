"""Terminal text and Markdown renderings of a diagnosis (plain text, deterministic)."""

from __future__ import annotations

from typing import Any

import polars as pl

from ..analysis import CAUSES, Diagnosis
from ..analysis.findings import Finding
from ..analysis.view import StepView
from .json_report import to_json_dict

BAR_WIDTH = 30

CAUSE_LABELS = {
    "compute": "compute",
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
    out.extend(_critical_path_text(data))
    if d.findings:
        out.append("Findings (largest cost first)")
        for i, f in enumerate(d.findings, 1):
            out.append(f" {i}. {f.title} [{f.kind}]")
            cost = f"    {f.ms_per_step:,.2f} ms per step ({100 * f.share_of_step:.1f}% of the step) in {f.steps_affected} steps"
            if f.worst_steps:
                cost += "; worst steps " + ", ".join(str(x) for x in f.worst_steps)
            out.append(cost)
            if f.predicted_step_ms is not None:
                out.append(f"    predicted step time if fixed: {f.predicted_step_ms:,.2f} ms{_saving(s, f.predicted_step_ms)}")
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


#: labels of the critical path's causes (tracekit.analysis.whatif.CP_CAUSES)
PATH_LABELS = {
    "gpu_compute": "GPU compute",
    "communication": "communication",
    "memcpy": "copies",
    "launch_overhead": "launch overhead",
    "data_loading": "data loading",
    "host_device_sync": "host-device sync",
    "allocator": "allocator",
    "cpu_other": "other host work",
}


def _saving(summary: dict[str, Any], predicted_ms: float) -> str:
    base = summary.get("step_ms_mean")
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


def _short(name: str, width: int = 80) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _cell(text: object) -> str:
    """Text safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(d: Diagnosis, view: StepView | None = None, image: str | None = None) -> str:
    """The report for a pull-request comment: the HTML report's content as tables.

    ``view`` (the representative step, built by the caller) adds the timeline section;
    ``image`` links a picture (e.g. an uploaded screenshot of the HTML report) under the title.
    """
    data = to_json_dict(d)
    s = data["summary"]
    out = [f"## tracekit diagnosis: `{data['trace']['path']}`", ""]
    out.extend(f"{line}  " for line in _headline(d, data))
    out.append("")
    if image:
        out += [f"![tracekit report]({image})", ""]
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
            out.append(f"| {st['rank']} | {st['step']} | {st['dur_ns'] / 1e6:,.2f} | {_pct(st['utilization'])} | "
                       f"{'yes' if st['complete'] else 'no (partial)'} |")
        out += ["", "</details>", ""]
    if view is not None:
        out += _markdown_view(d, view)
    out += _critical_path_markdown(data)
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
            out.append(f"{i}. **{f.title}**.{where} Evidence: {_evidence_text(f) or 'see JSON report'}. Fix: {f.fix}")
        out.append("")
    else:
        out += ["No findings.", ""]
    sp = data["sync_points"]
    if sp["count"]:
        out += ["### Sync points", "",
                f"{sp['count']} sync points ({sp['per_step']} per step, {sp['explicit']} from explicit sync events); "
                f"the host was blocked {sp['blocked_ms']:,.1f} ms in them.", "",
                "| call | operator | kind | count | blocked ms |", "|---|---|---|---:|---:|"]
        for t in sp["top"]:
            out.append(f"| `{_cell(t['api'])}` | {('`' + _cell(t['op']) + '`') if t['op'] else ''} | {t['sync_kind'] or ''} | "
                       f"{t['count']} | {t['blocked_ms']:,.3f} |")
        out.append("")
    k = data["kernels"]
    if k["top"]:
        out += ["### Top kernels", "",
                f"{k['count']:,} kernels, {k['time_ms']:,.1f} ms in all; median {k['median_us']} µs; "
                f"{100 * (k['short_kernel_share'] or 0):.0f}% shorter than 10 µs.", "",
                "| kernel | category | count | total ms | share | tensor cores |", "|---|---|---:|---:|---:|---|"]
        for r in k["top"][:10]:
            tc = {True: "yes", False: "no (fp32)"}.get(r["tensor_cores"], "?")
            out.append(f"| `{_cell(_short(r['name'], 70))}` | {r['category']} | {r['count']} | {r['total_ms']:,.2f} | "
                       f"{100 * (r['share'] or 0):.1f}% | {tc} |")
        out.append("")
    mem = [m for m in data["memory"] if m["peak_reserved_bytes"] or m["peak_allocated_bytes"]]
    if mem:
        out += ["### Device memory", "", "| device | peak allocated | peak reserved | total | unused at peak |",
                "|---:|---:|---:|---:|---:|"]
        for m in mem:
            out.append(f"| {m['device']} | {_gib(m['peak_allocated_bytes'])} | {_gib(m['peak_reserved_bytes'])} | "
                       f"{_gib(m['total_bytes'])} | {_pct(m['headroom'])} |")
        out.append("")
    if data["data_quality"] or data["warnings"]:
        out += ["### Notes", ""]
        out.extend(f"- {n}" for n in [*data["data_quality"], *data["warnings"]])
        out.append("")
    out.append(f"<sub>tracekit {data['tracekit_version']}</sub>")
    return "\n".join(out).rstrip() + "\n"


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


def _job_evidence(f: Finding) -> str:
    ev = f.evidence
    if f.kind == "straggler":
        late = ", ".join(f"rank {r} {v:,.2f} ms" for r, v in (ev.get("late_ms_per_step") or {}).items())
        basis = "at collectives" if ev.get("basis") == "collective_start" else "at step starts"
        return f"late {basis} per step: {late}; {ev.get('matched_collectives', 0)} collectives matched across ranks"
    if f.kind == "load_imbalance":
        return (f"compute per step: busiest rank {ev.get('busiest_rank')}, least busy rank {ev.get('least_busy_rank')}, "
                f"spread {ev.get('compute_spread_ms') or 0:,.2f} ms")
    if f.kind == "exposed_communication":
        return (f"{ev.get('exposed_ms_per_step') or 0:,.2f} ms per step exposed on average, "
                f"{ev.get('waiting_for_stragglers_ms') or 0:,.2f} ms of it waiting for late ranks")
    return _evidence_text(f)


def _job_lines(jd: Any) -> tuple[list[str], dict[str, Any]]:
    from .json_report import job_to_json_dict

    data = job_to_json_dict(jd)
    j = data["job"]
    ws = f" of {j['world_size']}" if j["world_size"] and j["world_size"] != len(j["ranks"]) else ""
    head = [
        f"tracekit · job {j['name']}",
        f"{len(j['ranks'])} rank{'s' if len(j['ranks']) != 1 else ''}{ws} · {len(j['files'])} file{'s' if len(j['files']) != 1 else ''}"
        f" · {j['aligned_steps']} aligned steps · step time {_ms(j['step_ms_median'])} (median)",
    ]
    return head, data


def render_job_text(jd: Any, *, rank_details: int = 4) -> str:
    """Terminal text for a job: per-rank table, the comparison across ranks, and each rank's report
    (when there are at most ``rank_details`` ranks)."""
    head, data = _job_lines(jd)
    j = data["job"]
    out = [*head, ""]
    out.append("Ranks (ms per step; * straggler)")
    out.append(f"  {'rank':>5} {'steps':>5} {'step':>10} {'GPU util':>8} {'compute':>9} {'exposed comm':>12} {'late':>8} {'wait':>8}  top finding · file")
    for r in j["per_rank"]:
        mark = "*" if r["straggler"] else " "
        util = _pct(r["gpu_utilization"])

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
            out.append(f"    {f.ms_per_step:,.2f} ms per step ({100 * f.share_of_step:.1f}% of the step)"
                       + (f"; fixed, the job step would be {_ms(f.predicted_step_ms)}" if f.predicted_step_ms is not None else ""))
            out.append(f"    evidence: {_job_evidence(f)}")
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
    return (f"clocks aligned on the ends of {m['matched_collectives']} collectives: {what}; "
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
    out.append(f"  job step {_ms(m['step_ms'])} between the last collectives of consecutive steps, over {m['steps']} steps{err}")
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
            out.append(f"    {w['question']}: job step {_ms(w['predicted_step_ms'])} (saves {w['saving_ms']:,.2f} ms)")
    out += [f"  note: {n}" for n in m["notes"]]
    out.append("")
    return out


def _job_model_markdown(m: dict[str, Any] | None) -> list[str]:
    if m is None:
        return []
    out = ["### The job as one system", "", _clock_line(m).capitalize() + ".", ""]
    if m["step_ms"] is not None:
        err = f" (the replay reproduces it within {100 * m['replay_error']:.1f}%)" if m["replay_error"] is not None else ""
        out += [f"Job step: {_ms(m['step_ms'])}{err}.", ""]
        if m["critical_path"]:
            out += ["| on the cross-rank critical path | cause | ms per step | share |", "|---|---|---:|---:|"]
            out += [f"| {_who(p['rank'])} | {p['cause']} | {p['ms_per_step']:,.2f} | {_pct(p['share'])} |" for p in m["critical_path"][:8]]
            out.append("")
        if m["waits"]:
            out += ["| rank | waits at collectives, ms per step | mostly for |", "|---:|---:|---|"]
            out += [f"| {w['rank']} | {w['wait_ms_per_step']:,.2f} | {'' if w['waits_for'] is None else 'rank ' + str(w['waits_for'])} |" for w in m["waits"]]
            out.append("")
        if m["what_ifs"]:
            out += ["| what if | job step | saves ms |", "|---|---:|---:|"]
            out += [f"| {_cell(w['question'])} | {_ms(w['predicted_step_ms'])} | {w['saving_ms']:,.2f} |" for w in m["what_ifs"][:10]]
            out.append("")
    out += [f"- {n}" for n in m["notes"]]
    if m["notes"]:
        out.append("")
    return out


def render_job_markdown(jd: Any) -> str:
    """Markdown for a job: the per-rank table and the findings across ranks."""
    head, data = _job_lines(jd)
    j = data["job"]
    out = [f"## tracekit diagnosis: job `{j['name']}`", "", f"{head[1]}  ", ""]
    out += ["| rank | steps | step ms | GPU util | compute ms | exposed comm ms | late ms | wait ms | top finding |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in j["per_rank"]:
        cells = [f"**{r['rank']}** (straggler)" if r["straggler"] else str(r["rank"]), str(r["steps"])]
        for key in ("step_ms_median", "gpu_utilization", "compute_ms", "exposed_communication_ms", "late_ms", "wait_ms"):
            v = r[key]
            cells.append("n/a" if v is None else (_pct(v) if key == "gpu_utilization" else f"{v:,.2f}"))
        cells.append(f"`{r['top_finding']}`" if r["top_finding"] else "")
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    out += _job_model_markdown(j.get("model"))
    if jd.multirank.findings:
        out += ["### Findings across ranks", ""]
        for i, f in enumerate(jd.multirank.findings, 1):
            predicted = f" Fixed, the job step would be {_ms(f.predicted_step_ms)}." if f.predicted_step_ms is not None else ""
            out.append(f"{i}. **{f.title}** (`{f.kind}`): {f.ms_per_step:,.2f} ms per step ({100 * f.share_of_step:.1f}%).{predicted} "
                       f"Evidence: {_cell(_job_evidence(f))}. Fix: {f.fix}")
        out.append("")
    elif len(j["ranks"]) > 1:
        out += ["No findings across ranks: no straggler, imbalance or exposed communication costs 5% of the step.", ""]
    if j["notes"]:
        out += ["### Notes", ""]
        out.extend(f"- {n}" for n in j["notes"])
        out.append("")
    return "\n".join(out).rstrip() + "\n"
