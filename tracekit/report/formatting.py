"""Headless formatting shared by every front end: the text report, the HTML report and the TUI.

Labels of causes and findings come from :mod:`tracekit.analysis.causes`; this module turns a
diagnosis' numbers and a finding's evidence into short strings.  It imports neither rich nor
textual, so the terminal UI and the static reports can share it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from ..analysis import Diagnosis
from ..analysis.causes import (
    ACTIONS,
    CAUSE_LABELS,
    CAUSES,
    FINDING_BY_NAME,
    GENERIC,
    IDLE_CAUSES,
    PATH_LABELS,
    SHORT_LABELS,
    TITLES,
    cause_label,
    path_label,
)
from ..analysis.efficiency import nonzero_digits
from ..analysis.findings import Finding
from ..analysis.plan import Plan


def fmt_pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


#: how the job step of a one-step capture is measured (the job model's ``one_step``)
ONE_STEP_BASIS = "of the one profiled step: from each rank's step start to its end, median over ranks"


def fmt_ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.2f} ms"


#: units of a duration in nanoseconds, largest first: (nanoseconds per unit, unit)
_NS_UNITS = ((1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "µs"))


def scale_ns(ns: float) -> tuple[float, str]:
    """A duration in the unit that reads best: ``(value, unit)``, unit ``ns``, ``µs``, ``ms`` or ``s``."""
    for size, unit in _NS_UNITS:
        if abs(ns) >= size:
            return ns / size, unit
    return ns, "ns"


def headline(d: Diagnosis, data: dict[str, Any]) -> list[str]:
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
    # a CPU-only capture has no GPU to be utilised: say what the numbers are about instead
    host_only = s["gpu_utilization"] is None and d.timeline.per_step.height == 0 and d.steps.height > 0
    util = "host only (no GPU recorded)" if host_only else f"GPU utilization {fmt_pct(s['gpu_utilization'])}"
    lines.append(f"step time {fmt_ms(s['step_ms_median'])} (median) · {util}")
    if s.get("mfu_note"):
        achieved = d.efficiency.achieved_tflops
        rate = f" · {nonzero_digits(achieved)} model TFLOP/s achieved" if achieved is not None else ""
        lines.append(s["mfu_note"] + rate)
    return lines


def fmt_num(x: float | None, nd: int = 1) -> str:
    return "n/a" if x is None else f"{x:,.{nd}f}"


def finding_cost(f: Finding, *, steps: bool = True) -> str:
    """A finding's cost in words: ms per step and share of the step, then (``steps``) the steps it
    affects and the worst ones."""
    cost = f"{f.ms_per_step:,.2f} ms per step ({100 * f.share_of_step:.1f}% of the step)"
    if steps:
        cost += f" in {f.steps_affected} steps"
        if "intermittent" in f.evidence:
            cost += intermittent_note(f.evidence["intermittent"])
        if f.worst_steps:
            cost += "; worst steps " + ", ".join(str(x) for x in f.worst_steps)
    return cost


#: labels of the efficiency split of step time (tracekit.analysis.efficiency)
SPLIT_LABELS = {
    "busy_efficient": "busy at the roofline",
    "busy_inefficient": "busy below the roofline",
    "busy_unmodelled": "busy, no shapes/model",
    "idle": "idle",
}


#: evidence keys every measured finding has (rendered by :func:`evidence_text` for all kinds)
_COMMON_EVIDENCE = frozenset({"total_ms", "gaps", "largest_gap"})

#: a kind's evidence → the bits of its one-line wording
Wording = Callable[[dict[str, Any]], list[str]]


def _data_loading_words(ev: dict[str, Any]) -> list[str]:
    bits = [f"{r['name']} ×{r['count']} ({r['total_ms']:,.1f} ms)" for r in ev.get("ranges", [])[:2]]
    if ev.get("single_process_dataloader"):
        bits.append("single-process DataLoader (num_workers=0)")
    return bits


def _sync_words(ev: dict[str, Any]) -> list[str]:
    bits = []
    for c in ev.get("sync_calls", [])[:3]:
        where = f" in {c['op']}" if c.get("op") else ""
        bits.append(f"{c['api']}{where} ×{c['count']} (blocked {c['blocked_ms']:,.1f} ms)")
    if ev.get("python_frames"):
        bits.append("from " + "; ".join(ev["python_frames"][:2]))
    return bits


def _pageable_words(ev: dict[str, Any]) -> list[str]:
    return [f"{ev.get('pageable_copies', 0)} copies, {ev.get('pageable_bytes', 0) / 2**20:,.1f} MiB from/to pageable memory"]


def _launch_words(ev: dict[str, Any]) -> list[str]:
    bits = []
    if ev.get("median_kernel_us") is not None:
        bits.append(f"median kernel {ev['median_kernel_us']} µs")
    if ev.get("kernels_per_step") is not None:
        bits.append(f"{ev['kernels_per_step']} kernels per step")
    if ev.get("memory_headroom") is not None:
        bits.append(f"{100 * ev['memory_headroom']:.0f}% of device memory unused at peak")
    if ev.get("median_gemm_us") is not None:
        bits.append(f"median GEMM {ev['median_gemm_us']} µs")
    return bits


def _communication_words(ev: dict[str, Any]) -> list[str]:
    return list(ev.get("communication_kernels", [])[:2])


def _tensor_core_words(ev: dict[str, Any]) -> list[str]:
    return list(ev.get("fp32_matmul_kernels", [])[:2])


def _shape_words(ev: dict[str, Any]) -> list[str]:
    """The GEMM shapes an efficiency finding lists (fp32 and small GEMMs)."""
    bits = []
    for o in ev.get("ops", [])[:3]:
        tiles = f", {o['tiles']} tiles" if o.get("tiles") is not None else ""
        bits.append(f"{o['op']} {o['shape']} {o['dtype']} ×{o['calls']} at {o['tflops']} TFLOP/s{tiles}")
    return bits


def _fp32_gemm_words(ev: dict[str, Any]) -> list[str]:
    bits = _shape_words(ev)
    if ev.get("saving_ms_per_step"):
        sv = ev["saving_ms_per_step"]
        tf32 = f" (TF32: {sv['tf32']} ms)" if sv.get("tf32") is not None else ""
        bits.append(f"at the bf16 peak they would take {sv['bf16']} ms less per step{tf32}")
    return bits


def _small_gemm_words(ev: dict[str, Any]) -> list[str]:
    return [*_shape_words(ev), f"the GPU has {ev.get('sm_count')} SMs"]


def _unfused_words(ev: dict[str, Any]) -> list[str]:
    bits = [f"{ev.get('chains_per_step')} chains per step of {ev.get('ops_per_chain')} ops on average"]
    bits.extend(f"{c['ops']} ×{c['count']}" for c in ev.get("chains", [])[:2])
    return bits


def _elementwise_transfer_words(ev: dict[str, Any]) -> list[str]:
    where = f" at {ev['location']}" if ev.get("location") else ""
    return [
        f"{ev.get('element_reads', 0):,} reads of {ev.get('bytes_per_read', 0)} bytes by {ev.get('op')} in "
        f"{ev.get('loops', 0)} loop(s){where}, each waiting for the GPU"
    ]


def _allocator_words(ev: dict[str, Any]) -> list[str]:
    return [f"{c['api']} ×{c['count']}" for c in ev.get("calls", [])]


def _host_work_words(ev: dict[str, Any]) -> list[str]:
    return [f"{o['name']} ({o['ms_in_gaps']:,.1f} ms)" for o in ev.get("top_host_ops", [])[:3]]


def _untraced_words(ev: dict[str, Any]) -> list[str]:
    """What is known of idle time nothing recorded explains."""
    bits = []
    if ev.get("idle_share") is not None:
        bits.append(f"GPU idle {100 * ev['idle_share']:.1f}% of the step, {100 * ev.get('untraced_share', 0):.1f}% unexplained")
    if ev.get("host_recorded_share") is not None:
        last = f", the last ends {ev['last_host_event_ms']:,.2f} ms into the step" if ev.get("last_host_event_ms") is not None else ""
        bits.append(f"recorded host events cover {nonzero_digits(100 * ev['host_recorded_share'])}% of the step{last}")
    for r in ev.get("compiled_regions", [])[:2]:
        bits.append(f"torch.compile region {r['name']} ×{r['count']}")
    if ev.get("compiled_regions") and not ev.get("compile_events"):
        bits.append("its compilation is not recorded (a region's first call compiles it)")
    bits.extend(f"compilation {r['name']} ×{r['count']} ({r['total_ms']:,.1f} ms)" for r in ev.get("compile_events", [])[:2])
    if ev.get("python_stacks") is False:
        bits.append("no Python stacks (with_stack=False)")
    return bits


def _plain_facts(ev: dict[str, Any]) -> list[str]:
    """A kind without wording of its own: its first plain facts, so a newly declared kind reads."""
    facts = [(k, v) for k, v in ev.items() if k not in _COMMON_EVIDENCE and isinstance(v, (int, float, str))]
    return [f"{k.replace('_', ' ')} {v}" for k, v in facts[:3]]


#: the one-line wordings the registry names (``FindingKind.wording``), by name
EVIDENCE_WORDING: Mapping[str, Wording] = MappingProxyType({
    "data_loading": _data_loading_words,
    "host_device_sync": _sync_words,
    "pageable_memcpy": _pageable_words,
    "launch_bound": _launch_words,
    "exposed_communication": _communication_words,
    "no_tensor_cores": _tensor_core_words,
    "fp32_gemm": _fp32_gemm_words,
    "small_gemm": _small_gemm_words,
    "unfused_elementwise": _unfused_words,
    "elementwise_transfer": _elementwise_transfer_words,
    "allocator": _allocator_words,
    "cpu_bound": _host_work_words,
    "untraced_idle": _untraced_words,
})


def location_text(loc: Any) -> str:
    """``file:line in function (×N): code`` of a code location (``Finding.location``), or ''."""
    if loc is None:
        return ""
    where = f"{loc.file}:{loc.line}" + (f" in {loc.function}" if getattr(loc, "function", None) else "")
    count = getattr(loc, "count", 0)
    code = getattr(loc, "code", None)
    return where + (f" (×{count})" if count else "") + (f": {code}" if code else "")


def evidence_text(f: Finding) -> str:
    """A single-trace finding's evidence in one line (the JSON report has all of it)."""
    ev = f.evidence
    kind = FINDING_BY_NAME.get(f.kind)
    bits = EVIDENCE_WORDING.get(kind.wording if kind else GENERIC, _plain_facts)(ev)
    if ev.get("largest_gap"):
        g = ev["largest_gap"]
        bits.append(f"largest gap {g['dur_ms']:,.2f} ms in step {g['step']}")
    return "; ".join(bits)


def _straggler_words(ev: dict[str, Any]) -> str:
    late = ", ".join(f"rank {r} {v:,.2f} ms" for r, v in (ev.get("late_ms_per_step") or {}).items())
    basis = "at collectives" if ev.get("basis") == "collective_start" else "at step starts"
    return f"late {basis} per step: {late}; {ev.get('matched_collectives', 0)} collectives matched across ranks"


def _imbalance_words(ev: dict[str, Any]) -> str:
    return (f"compute per step: busiest rank {ev.get('busiest_rank')}, least busy rank {ev.get('least_busy_rank')}, "
            f"spread {ev.get('compute_spread_ms') or 0:,.2f} ms")


def _job_communication_words(ev: dict[str, Any]) -> str:
    return (f"{ev.get('exposed_ms_per_step') or 0:,.2f} ms per step exposed on average, "
            f"{ev.get('waiting_for_stragglers_ms') or 0:,.2f} ms of it waiting for late ranks")


#: the one-line wordings of job findings the registry names (``FindingKind.job_wording``), by name
JOB_WORDING: Mapping[str, Callable[[dict[str, Any]], str]] = MappingProxyType({
    "straggler": _straggler_words,
    "load_imbalance": _imbalance_words,
    "exposed_communication": _job_communication_words,
})


def job_evidence_text(f: Finding) -> str:
    """A cross-rank finding's evidence in one line (single-trace kinds: :func:`evidence_text`)."""
    kind = FINDING_BY_NAME.get(f.kind)
    wording = JOB_WORDING.get(kind.job_wording if kind else GENERIC)
    return evidence_text(f) if wording is None else wording(f.evidence)


def job_lines(jd: Any) -> tuple[list[str], dict[str, Any]]:
    """The two headline lines of a job's report, and its JSON document."""
    from .json_report import job_to_json_dict

    data = job_to_json_dict(jd)
    j = data["job"]
    ws = f" of {j['world_size']}" if j["world_size"] and j["world_size"] != len(j["ranks"]) else ""
    head = [
        f"tracekit · job {j['name']}",
        f"{len(j['ranks'])} rank{'s' if len(j['ranks']) != 1 else ''}{ws} · {len(j['files'])} file{'s' if len(j['files']) != 1 else ''}"
        f" · {j['aligned_steps']} aligned steps · step time {fmt_ms(j['step_ms_median'])} (median)",
    ]
    return head, data


def job_label(folder: str, name: str) -> str:
    """A job's name relative to the folder that holds it."""
    prefix = folder.rstrip("/") + "/"
    return name[len(prefix):] if name.startswith(prefix) else name


__all__ = [
    "CAUSES",
    "CAUSE_LABELS",
    "EVIDENCE_WORDING",
    "IDLE_CAUSES",
    "JOB_WORDING",
    "PATH_LABELS",
    "SHORT_LABELS",
    "SPLIT_LABELS",
    "cause_label",
    "evidence_text",
    "finding_cost",
    "fmt_ms",
    "fmt_num",
    "fmt_pct",
    "headline",
    "intermittent_prediction",
    "job_evidence_text",
    "job_label",
    "job_lines",
    "location_text",
    "path_label",
    "scale_ns",
]


def intermittent_prediction(f: Finding, number: Callable[[str], str] = str) -> str | None:
    """The prediction line of a cause in only some steps ("predicted mean step if fixed: ..."),
    priced by the mean step it removes (docs/analysis.md); None for any other finding.
    ``number`` dresses the predicted figure (the HTML report bolds it)."""
    ev = f.evidence.get("intermittent")
    if not ev:
        return None
    figure = number(f"{ev['predicted_mean_step_ms']:,.2f} ms")
    return (
        f"predicted mean step if fixed: {figure} (from {ev['mean_step_ms']:,.2f} ms; "
        f"the median step becomes {f.predicted_step_ms:,.2f} ms)"
    )


def intermittent_note(ev: Mapping[str, float]) -> str:
    """The cost line's note for a cause in only some steps (priced by its mean saving)."""
    return (
        f" (mean over the steady steps: it hits only some; the mean step {ev['mean_step_ms']:,.2f} → "
        f"{ev['predicted_mean_step_ms']:,.2f} ms, the median barely moves)"
    )


def plan_lines(plan: Plan, kinds: bool = True) -> list[str]:
    """The fix plan in plain lines: each step's fix, the step before → after with the earlier
    steps applied, its saving and GPU busy share, its alternatives and code location, then
    what bounds the step (empty: no plan and nothing to say)."""
    if not plan.steps:
        return [f"  {plan.note}"] if plan.note else []
    out: list[str] = []
    before, busy = plan.step_ms, plan.gpu_utilization
    for i, st in enumerate(plan.steps, 1):
        tag = f" [{st.kind}]" if kinds else ""
        out.append(f" {i}. {st.action[0].upper()}{st.action[1:]}{tag}")
        util = "" if busy is None or st.gpu_utilization is None else f", GPU busy {busy:.0%} → {st.gpu_utilization:.0%}"
        rate = "" if st.throughput is None else f", {st.throughput:,.1f} samples/s"
        step = "mean step" if plan.statistic == "mean" else "step"
        out.append(f"    {step} {fmt_ms(before)} → {fmt_ms(st.predicted_step_ms)} (saves {st.saves_ms:,.2f} ms per step{util}{rate})")
        loc = location_text(st.location)
        if loc:
            out.append(f"    at {loc}")
        for alt in st.alternatives:
            words = ACTIONS.get(alt) or TITLES.get(alt, alt)
            out.append(f"    or instead: {words}" + (f" [{alt}]" if kinds else "") + " (about the same saving)")
        before, busy = st.predicted_step_ms, st.gpu_utilization
    if plan.bound is not None:
        out.append(f"  then the step is bound by {plan.bound.text}")
    return out

