"""Evaluate the replay model (tracekit/analysis/replay.py) against measurements and simulated truth.

Five reports, printed as Markdown tables (``--json FILE`` also writes them as JSON):

(a) replay error on every trace under ../shared/traces and sample_traces: the median step of
    the trace replayed unchanged against the median measured step;
(b) what-if error per simulated scenario and fix (tests/loopsim): the predicted step time after
    the fix against the same loop re-simulated with the fix applied, plus the largest saving any
    fix claims on the healthy control;
(c) real before/after pairs: the step time predicted for the fix on the "before" trace against
    the "after" trace's measured step;
(d) what-if error on the behaviours of real PyTorch the simulator models (tests/loopsim
    ``BEHAVIOURS`` and ``PLANS``: the autograd thread, CUDA graphs, element-wise transfers, the
    pin-memory thread, the workers' hand-off, efficiency fixes): each single fix priced by the
    analysis as it is (the replay's edit of the finding kind that names the fix, or the
    efficiency finding's saving) against the loop re-simulated with the fix, and the findings
    ``diagnose`` reports on the healthy controls;
(e) plans: each mixed scenario's fix plan (tracekit/analysis/plan.py), every prefix's predicted
    step against the loop re-simulated with the prefix's fixes applied together, then the
    re-simulated step of every subset of the scenario's fixes.

Usage::

    python scripts/eval_replay.py [--only a|b|c|d|e] [--json results.json] [--max-mb 50]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import tracekit  # noqa: E402
from tracekit.analysis.replay import FIX_MODELS, fix_edit, replay  # noqa: E402
from tracekit.analysis.steps import find_steps  # noqa: E402
from tracekit.errors import TracekitError  # noqa: E402

SHARED = REPO.parent / "shared" / "traces"
SAMPLES = REPO / "sample_traces"
_TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".nsys-rep")


def _traces(max_bytes: int) -> list[Path]:
    found = []
    for root in (SHARED, SAMPLES):
        if not root.exists():
            continue
        for p in sorted(root.rglob("*")):
            if not p.is_file() or not p.name.endswith(_TRACE_SUFFIXES) or p.name.endswith(".expected.json"):
                continue
            if p.name in ("metadata.json",) or p.stat().st_size > max_bytes:
                continue
            found.append(p)
    return found


def _name(p: Path) -> str:
    for root in (SHARED, REPO):
        try:
            return str(p.relative_to(root.parent if root is SHARED else root))
        except ValueError:
            continue
    return str(p)


def replay_errors(max_bytes: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in _traces(max_bytes):
        t0 = time.perf_counter()
        try:
            tables = tracekit.read_trace(path)
        except TracekitError as exc:
            rows.append({"trace": _name(path), "status": f"not read: {str(exc).splitlines()[0][:80]}"})
            continue
        steps = find_steps(tables.events, tables.links)
        r = replay(tables.events, tables.links, steps.frame)
        sources = sorted(set(steps.sources.values()))
        rows.append({
            "trace": _name(path),
            "status": "ok" if r.error is not None else "no complete steps",
            "steps": int(r.steps.height),
            "step_source": ",".join(sources),
            "measured_ms": r.measured_step_ms,
            "recorded_ms": r.recorded_step_ms,
            "replayed_ms": r.replayed_step_ms,
            "error": r.error,
            "seconds": round(time.perf_counter() - t0, 2),
        })
        print(f"  {rows[-1]['trace']}: {rows[-1]['status']} error={r.error}", file=sys.stderr)
    return rows


#: a finding kind of section (b) whose modelled fix is a simulator fix of another name: the
#: launch-bound finding's fix is CUDA graphs (the simulator's ``launch_bound`` edit, dispatch and
#: launch cost ÷ 20, was the first replay model's assumption)
TRUTH_OF = {"launch_bound": "cuda_graphs"}


def whatif_errors() -> tuple[list[dict[str, Any]], dict[str, float]]:
    from loopsim import FIXES, INTERMITTENT, SCENARIOS, mean_truth, simulate, truth, write_kineto

    rows: list[dict[str, Any]] = []
    control: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (loop, fixes) in SCENARIOS.items():
            run = simulate(loop)
            tables = tracekit.read_trace(write_kineto(run, Path(tmp) / f"{name}.json"))
            steps = find_steps(tables.events, tables.links).frame
            edits = [e for k in FIXES if (e := fix_edit(k)) is not None]
            r = replay(tables.events, tables.links, steps, edits)
            if not fixes:
                step = r.measured_step_ms or 0.0
                control[name] = max((r.saving_ms(e.label) or 0.0) / step for e in edits) if step else 0.0
            for fix in fixes:
                true_ms = truth(loop, TRUTH_OF.get(fix, fix)) / 1e6
                pred = r.predicted_step_ms(fix)
                rows.append({
                    "scenario": name, "fix": fix, "step_ms": run.steady_step_ns / 1e6, "truth_ms": true_ms, "predicted_ms": pred,
                    "error": None if pred is None else abs(pred - true_ms) / true_ms,
                })
        # causes in only some steps: stated as the mean saving per steady step, held to the
        # re-simulated loop's mean steady step
        for name, (loop, fixes) in INTERMITTENT.items():
            run = simulate(loop)
            tables = tracekit.read_trace(write_kineto(run, Path(tmp) / f"{name}.json"))
            steps = find_steps(tables.events, tables.links).frame
            r = replay(tables.events, tables.links, steps, [e for k in fixes if (e := fix_edit(k)) is not None])
            mean_ms = run.mean_steady_step_ns / 1e6
            for fix in fixes:
                true_ms = mean_truth(loop, fix) / 1e6
                saving = r.mean_saving_ms(fix)
                pred = None if saving is None else mean_ms - saving
                rows.append({
                    "scenario": f"{name} (mean step)", "fix": fix, "step_ms": mean_ms, "truth_ms": true_ms, "predicted_ms": pred,
                    "error": None if pred is None else abs(pred - true_ms) / true_ms,
                })
    return rows, control


#: a simulator fix → the finding kind whose price is the analysis' prediction for it (the
#: simulator's fixes named after a finding kind price as that kind)
ANALYSIS_KIND = {
    "cuda_graphs": "launch_bound",
    "compile_reduce_overhead": "launch_bound",
    "amp": "fp32_gemm",
    "fuse_elementwise": "unfused_elementwise",
}


def _finding_ms(f: Any, step_ms: float | None) -> float | None:
    """The step a finding predicts once fixed (its replayed price, else step − its saving)."""
    if f is None:
        return None
    if f.predicted_step_ms is not None:
        return float(f.predicted_step_ms)
    return None if step_ms is None else step_ms - f.ms_per_step


def _truth_ms(loop: Any, fix: str) -> float:
    """The re-simulated step with ``fix`` (ms): the steady step, or for a loop without step
    markers (which the analysis reads as one step, the whole trace) the whole run."""
    from loopsim import apply_fixes, simulate, truth

    if loop.step_markers:
        return float(truth(loop, fix)) / 1e6
    return float(sum(simulate(apply_fixes(loop, fix)).step_ns)) / 1e6


def behaviour_errors() -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """Section (d): every single fix of the new scenarios, priced as the analysis prices it."""
    from loopsim import BEHAVIOURS, PLANS, simulate, write_kineto

    from tracekit.analysis import diagnose

    rows: list[dict[str, Any]] = []
    controls: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (loop, fixes) in {**BEHAVIOURS, **PLANS}.items():
            print(f"  {name}", file=sys.stderr)
            run = simulate(loop)
            tables = tracekit.read_trace(write_kineto(run, Path(tmp) / f"{name}.json"), cache=False)
            steps = find_steps(tables.events, tables.links).frame
            kinds = [ANALYSIS_KIND.get(f, f) for f in fixes]
            edits = {k: e for k in kinds if (e := fix_edit(k)) is not None}
            r = replay(tables.events, tables.links, steps, list(edits.values()))
            found = {f.kind: f for f in diagnose(tables).findings}
            if not fixes:
                controls[name] = [f"{f.kind} {f.ms_per_step:.2f} ms" for f in found.values()]
            for fix, kind in zip(fixes, kinds, strict=True):
                true_ms = _truth_ms(loop, fix)
                pred = r.predicted_step_ms(kind) if kind in edits else _finding_ms(found.get(kind), r.measured_step_ms)
                f = found.get(kind)
                step_ms = run.steady_step_ns if loop.step_markers else sum(run.step_ns)
                rows.append({
                    "scenario": name, "fix": fix, "priced_as": kind, "step_ms": step_ms / 1e6,
                    "analysis_step_ms": r.measured_step_ms, "truth_ms": true_ms, "predicted_ms": pred,
                    "error": None if pred is None else abs(pred - true_ms) / true_ms,
                    "diagnosed": "not found" if f is None else f"{f.ms_per_step:.2f} ms",
                })
    return rows, controls


def plan_truths() -> list[dict[str, Any]]:
    """Section (e): the re-simulated step of every subset of each plan scenario's fixes."""
    from loopsim import PLANS, subset_truths

    rows: list[dict[str, Any]] = []
    for name, (loop, fixes) in PLANS.items():
        for subset, ns in subset_truths(loop, fixes).items():
            rows.append({"scenario": name, "fixes": list(subset), "truth_ms": ns / 1e6})
    return rows


def plan_errors() -> list[dict[str, Any]]:
    """Section (e): every prefix of each plan scenario's fix plan against the re-simulated loop
    (the finding kinds → simulator fixes of tests/test_plan.py)."""
    from loopsim import PLANS, simulate, truth, write_kineto
    from test_plan import SIM_FIX

    from tracekit.analysis import diagnose

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (loop, _fixes) in PLANS.items():
            print(f"  plan {name}", file=sys.stderr)
            tables = tracekit.read_trace(write_kineto(simulate(loop), Path(tmp) / f"{name}.json"), cache=False)
            d = diagnose(tables)
            applied: list[str] = []
            if not d.plan.steps:
                rows.append({"scenario": name, "step": 0, "kind": None, "fixes": [], "predicted_ms": d.step_ms_median,
                             "truth_ms": truth(loop, []) / 1e6, "error": None, "alternatives": []})
            for i, st in enumerate(d.plan.steps, 1):
                applied.append(SIM_FIX[st.kind])
                true_ms = truth(loop, applied) / 1e6
                rows.append({
                    "scenario": name, "step": i, "kind": st.kind, "fixes": list(applied), "predicted_ms": st.predicted_step_ms,
                    "truth_ms": true_ms, "error": abs(st.predicted_step_ms - true_ms) / true_ms, "alternatives": list(st.alternatives),
                })
    return rows


def pairs() -> list[dict[str, Any]]:
    cases = [
        ("data_loading", SAMPLES / "captures" / "slow_dataloader", SAMPLES / "captures" / "slow_dataloader_fixed"),
        # the real ResNet-50 pair (V100): the same script with num_workers 0, then 4
        ("data_loading", SHARED / "kineto" / "tb_plugin_pair" / "resnet50_profiler_api_num_workers_0",
         SHARED / "kineto" / "tb_plugin_pair" / "resnet50_profiler_api_num_workers_4"),
        ("pageable_memcpy", SHARED / "gpupuzzlers" / "streams" / "blocking", SHARED / "gpupuzzlers" / "streams" / "non_blocking"),
        ("host_device_sync", SHARED / "gpupuzzlers" / "streams" / "blocking", SHARED / "gpupuzzlers" / "streams" / "non_blocking"),
        ("data_loading", SAMPLES / "synthetic" / "dataloader_stall.kineto.json", SAMPLES / "synthetic" / "dataloader_fixed.kineto.json"),
        ("host_device_sync", SAMPLES / "synthetic" / "host_sync.kineto.json", SAMPLES / "synthetic" / "host_sync_fixed.kineto.json"),
    ]
    rows: list[dict[str, Any]] = []
    for fix, before, after in cases:
        if not before.exists() or not after.exists():
            continue
        b, a = tracekit.read_trace(_one(before)), tracekit.read_trace(_one(after))
        edit = fix_edit(fix)
        assert edit is not None
        rb = replay(b.events, b.links, find_steps(b.events, b.links).frame, [edit])
        ra = replay(a.events, a.links, find_steps(a.events, a.links).frame)
        pred, after_ms = rb.predicted_step_ms(fix), ra.measured_step_ms
        rows.append({
            "fix": fix, "before": _name(before), "after": _name(after), "before_ms": rb.measured_step_ms, "predicted_ms": pred,
            "after_ms": after_ms, "error": None if pred is None or not after_ms else abs(pred - after_ms) / after_ms,
        })
    return rows


def _one(p: Path) -> Path:
    """A trace file: ``p`` itself, or the first trace in the folder ``p``."""
    if p.is_dir():
        return sorted(q for q in p.rglob("*") if q.name.endswith(_TRACE_SUFFIXES) and q.name != "metadata.json")[0]
    return p


def _f(x: Any, pct: bool = False) -> str:
    if x is None:
        return "–"
    return f"{100 * x:.2f}%" if pct else f"{x:.2f}"


def _table(header: list[str], text_columns: int, rows: list[list[str]]) -> None:
    """A Markdown table: the first ``text_columns`` columns left-aligned, the others numbers."""
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" if i < text_columns else "---:" for i in range(len(header))) + "|")
    for cells in rows:
        print("| " + " | ".join(cells) + " |")


def _print_behaviours(rows: list[dict[str, Any]], controls: dict[str, list[str]]) -> None:
    print("\n## (d) What-if error on the behaviours of real PyTorch (BEHAVIOURS and PLANS, single fixes)\n")
    print("priced as: the finding kind whose replayed edit (or efficiency saving) is the analysis' prediction;")
    print("analysis step: the median step the analysis measures (a trace without step markers is one step, and its")
    print("step and truth are then the whole run's);")
    print("diagnosed: that finding's saving per step in `diagnose`.\n")
    header = ["scenario", "fix", "priced as", "step ms", "analysis step ms", "truth ms", "predicted ms", "error", "diagnosed"]
    _table(header, 3, [
        [r["scenario"], r["fix"], r["priced_as"], _f(r["step_ms"]), _f(r["analysis_step_ms"]), _f(r["truth_ms"]), _f(r["predicted_ms"]),
         _f(r["error"], True), r["diagnosed"]]
        for r in rows
    ])
    errs = [r["error"] for r in rows if r["error"] is not None]
    if errs:
        print(f"\nmean error {_f(statistics.mean(errs), True)}, worst {_f(max(errs), True)} over {len(errs)} priced fixes "
              f"({len(rows) - len(errs)} not priced)")
    for name, found in controls.items():
        print(f"control `{name}`: " + ("no finding" if not found else "findings " + ", ".join(found)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["a", "b", "c", "d", "e"])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--max-mb", type=float, default=50.0, help="skip traces larger than this (default 50 MB)")
    args = ap.parse_args(argv)
    out: dict[str, Any] = {}
    if args.only in (None, "a"):
        rows = replay_errors(int(args.max_mb * 1e6))
        out["replay"] = rows
        errs = [r["error"] for r in rows if r.get("error") is not None]
        print("## (a) Replay error (trace replayed unchanged vs recorded, median steady-state step)\n")
        print("measured: the steps table's median step; recorded: the recorded trace's median step under the replay's definition")
        print("(until the host starts the next step and the GPU finished this step's work); error: replayed vs recorded.\n")
        print("| trace | steps | source | measured ms | recorded ms | replayed ms | error |\n|---|---:|---|---:|---:|---:|---:|")
        for r in rows:
            if r.get("error") is None:
                print(f"| {r['trace']} | – | – | – | – | – | {r['status']} |")
            else:
                print(f"| {r['trace']} | {r['steps']} | {r['step_source']} | {_f(r['measured_ms'])} | {_f(r['recorded_ms'])} | "
                      f"{_f(r['replayed_ms'])} | {_f(r['error'], True)} |")
        if errs:
            print(f"\n{len(errs)} traces replayed: median error {_f(statistics.median(errs), True)}, mean {_f(statistics.mean(errs), True)}, "
                  f"worst {_f(max(errs), True)}\n")
    if args.only in (None, "b"):
        rows, control = whatif_errors()
        out["what_if"], out["control"] = rows, control
        print("## (b) What-if error against the simulator's truth (re-simulated with the fix)\n")
        print("| scenario | fix | step ms | truth ms | predicted ms | error |\n|---|---|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r['scenario']} | {r['fix']} | {_f(r['step_ms'])} | {_f(r['truth_ms'])} | {_f(r['predicted_ms'])} | {_f(r['error'], True)} |")
        errs = [r["error"] for r in rows if r["error"] is not None]
        if errs:
            print(f"\nmean error {_f(statistics.mean(errs), True)}, worst {_f(max(errs), True)} over {len(errs)} fixes")
        for name, share in control.items():
            print(f"control `{name}`: the largest saving any fix claims is {_f(share, True)} of the step")
        print()
    if args.only in (None, "c"):
        rows = pairs()
        out["pairs"] = rows
        print("## (c) Real and recorded before/after pairs\n")
        print("| fix | before | after | before ms | predicted ms | after ms | error |\n|---|---|---|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r['fix']} | {r['before']} | {r['after']} | {_f(r['before_ms'])} | {_f(r['predicted_ms'])} | {_f(r['after_ms'])} | {_f(r['error'], True)} |")
        print("\nFixes modelled: " + "; ".join(f"`{k}`: {v}" for k, v in FIX_MODELS.items()))
    if args.only in (None, "d"):
        rows, controls = behaviour_errors()
        out["behaviours"], out["behaviour_controls"] = rows, controls
        _print_behaviours(rows, controls)
    if args.only in (None, "e"):
        out["plan_errors"] = prows = plan_errors()
        print("\n## (e) Fix plans: every prefix of the plan against the loop re-simulated with its fixes\n")
        _table(["scenario", "#", "step (kind)", "simulator fixes applied", "alternatives", "predicted ms", "truth ms", "error"], 5, [
            [r["scenario"], str(r["step"]), r["kind"] or "(empty plan)", " + ".join(r["fixes"]) or "(none)", ", ".join(r["alternatives"]),
             _f(r["predicted_ms"]), _f(r["truth_ms"]), _f(r["error"], True)]
            for r in prows
        ])
        perrs = [r["error"] for r in prows if r["error"] is not None]
        if perrs:
            print(f"\nmean error {_f(statistics.mean(perrs), True)}, worst {_f(max(perrs), True)} over {len(perrs)} plan prefixes")
        out["plans"] = rows = plan_truths()
        print("\n### Every subset of each mixed scenario's fixes, re-simulated together\n")
        _table(["scenario", "fixes applied", "truth ms"], 2, [[r["scenario"], " + ".join(r["fixes"]) or "(none)", _f(r["truth_ms"])] for r in rows])
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
