#!/usr/bin/env python3
"""Benchmark tracekit's critical path against Holistic Trace Analysis on the same windows.

Run in the benchmark venv (scripts/bench_env.sh installs tracekit and HTA side by side):

    .bench-venv/bin/python scripts/bench_critical_path.py            # prints the Markdown tables
    .bench-venv/bin/python scripts/bench_critical_path.py --quick    # one trace, for a smoke run

What is timed, on both sides, is building the graph and finding the longest path for one
window of an already-parsed trace (parsing is benchmarked by scripts/bench_parse.py):

* HTA: ``TraceAnalysis.critical_path_analysis(rank, annotation, instance_id)`` with the
  trace loaded once (its window is the annotation instance's CPU range);
* tracekit: ``critical_path_window(events, links, rank, start_ns, end_ns)`` on the same range
  (graph build with polars, path with networkx, breakdown).

Each is run ``--repeat`` times and the fastest run counts (the machine is shared; the fastest
run is the least disturbed one).  HTA runs in a child process per trace, so a crash or a hang
costs only that trace.  The whole-trace rows time tracekit's per-step critical path of every
step (what ``tracekit analyze`` computes) and HTA's ``annotation=""`` (whole trace) window.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from benchmachine import load_average, machine_line

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"


#: (trace folder under shared/traces, rank, annotation, instances): HTA loads every file of a folder
CASES: list[tuple[str, int, str, int]] = [
    ("hta/tests/data/df_index_resolver", 1, "ProfilerStep", 4),
    ("hta/tests/data/negative_queue_length_values_check", 0, "ProfilerStep", 3),
    ("hta/tests/data/trace_diff/control", 3, "ProfilerStep", 3),
    ("hta/tests/data/ns_resolution_trace", 0, "ProfilerStep", 3),
    ("hta/tests/data/nccl_parser_config", 0, "ProfilerStep", 2),
    ("hta/tests/data/critical_path/simple_add", 0, "[param|pytorch.model.alex_net|0|0|0|measure|forward]", 2),
]
#: the largest shared CUDA trace: every step, and the whole trace as one window
WHOLE = ("hta/tests/data/df_index_resolver", 1)

_HTA_CHILD = textwrap.dedent(
    """
    import json, logging, sys, time, warnings
    warnings.filterwarnings("ignore")
    logging.disable(logging.CRITICAL)
    from hta.trace_analysis import TraceAnalysis
    folder, rank, annotation, instances, repeat = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    t0 = time.perf_counter()
    ta = TraceAnalysis(trace_dir=folder)
    print(json.dumps({"load_s": time.perf_counter() - t0}), flush=True)
    for inst in range(instances):
        best, nodes, ok = None, None, False
        for _ in range(repeat):
            t0 = time.perf_counter()
            try:
                graph, ok = ta.critical_path_analysis(rank=rank, annotation=annotation, instance_id=inst)
            except Exception as exc:
                print(json.dumps({"instance": inst, "error": f"{type(exc).__name__}: {exc}"[:200]}), flush=True)
                break
            dt = time.perf_counter() - t0
            best = dt if best is None else min(best, dt)
            nodes = graph.number_of_nodes()
        else:
            print(json.dumps({"instance": inst, "seconds": best, "nodes": nodes, "ok": bool(ok)}), flush=True)
    """
)


def hta_times(folder: Path, rank: int, annotation: str, instances: int, repeat: int, timeout: int) -> dict[int, dict[str, Any]]:
    try:
        import hta  # noqa: F401
    except ImportError:
        return {}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _HTA_CHILD, str(folder), str(rank), annotation, str(instances), str(repeat)],
            capture_output=True, text=True, timeout=timeout, check=False,
        )
        lines = proc.stdout.splitlines()
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout
        lines = (out.decode() if isinstance(out, bytes) else out or "").splitlines()
    results: dict[int, dict[str, Any]] = {}
    for line in lines:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "instance" in row:
            results[int(row["instance"])] = row
    return results


def tracekit_windows(path: Path, annotation: str, instances: int) -> list[tuple[int, int]]:
    """The annotation instances' CPU ranges, in HTA's order (by start)."""
    import polars as pl

    import tracekit

    t = tracekit.read_trace(path)
    ann = t.events.filter(pl.col("name").str.contains(annotation, literal=True)).sort("start_ns")
    return [(int(r["start_ns"]), int(r["end_ns"])) for r in ann.head(instances).iter_rows(named=True)]


def best_of(fn: Any, repeat: int) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def trace_file(folder: Path) -> Path:
    files = sorted(p for p in folder.iterdir() if p.name.endswith((".json", ".json.gz")))
    return files[0]


def run(repeat: int, quick: bool, timeout: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    import tracekit
    from tracekit.analysis.critical_path import critical_path, critical_path_window
    from tracekit.analysis.steps import find_steps
    from tracekit.analysis.whatif import FINDING_WHAT_IF, WhatIf

    rows: list[dict[str, Any]] = []
    for rel, rank, annotation, instances in CASES[:1] if quick else CASES:
        folder = SHARED / rel
        if not folder.is_dir():
            print(f"skip {rel}: not found", file=sys.stderr)
            continue
        path = trace_file(folder)
        t = tracekit.read_trace(path)
        windows = tracekit_windows(path, annotation, instances)
        ours = []
        for start, end in windows:
            secs, cp = best_of(lambda s=start, e=end, t=t, r=rank: critical_path_window(t.events, t.links, r, s, e), repeat)
            ours.append((secs, int(cp.steps["nodes"][0]), int(cp.steps["edges"][0]), float(cp.steps["path_ns"][0] / max(cp.steps["wall_ns"][0], 1))))
        theirs = hta_times(folder, rank, annotation, len(windows), repeat, timeout)
        # tracekit again, after HTA, so both sides see the machine in the same state
        for i, (start, end) in enumerate(windows):
            secs, _ = best_of(lambda s=start, e=end, t=t, r=rank: critical_path_window(t.events, t.links, r, s, e), repeat)
            ours[i] = (min(ours[i][0], secs), *ours[i][1:])
        for i, (secs, nodes, edges, coverage) in enumerate(ours):
            h = theirs.get(i, {})
            rows.append({
                "trace": rel.removeprefix("hta/tests/data/"), "events": t.events.height, "instance": i,
                "window_ms": (windows[i][1] - windows[i][0]) / 1e6, "nodes": nodes, "edges": edges, "coverage": coverage,
                "tracekit_s": secs, "hta_s": h.get("seconds"), "hta_nodes": h.get("nodes"), "hta_error": h.get("error"),
            })
            print(rows[-1], flush=True)

    whole: list[dict[str, Any]] = []
    rel, rank = WHOLE
    folder = SHARED / rel
    if folder.is_dir() and not quick:
        path = trace_file(folder)
        t = tracekit.read_trace(path)
        steps = find_steps(t.events, t.links).frame
        secs, cp = best_of(lambda: critical_path(t.events, t.links, steps), repeat)
        wis = [WhatIf.of(f) for f in FINDING_WHAT_IF.values()]
        wsecs, _ = best_of(lambda: critical_path(t.events, t.links, steps, what_ifs=wis), max(1, repeat - 1))
        lo, hi = int(t.events["start_ns"].min()), int(t.events["end_ns"].max())  # type: ignore[arg-type]
        one, one_cp = best_of(lambda: critical_path_window(t.events, t.links, rank, lo, hi), max(1, repeat - 1))
        h = hta_times(folder, rank, "", 1, max(1, repeat - 1), timeout).get(0, {})
        whole.append({
            "trace": rel.removeprefix("hta/tests/data/"), "events": t.events.height, "steps": cp.steps.height,
            "all_steps_s": secs, "all_steps_what_ifs_s": wsecs, "what_ifs": len(wis),
            "whole_window_s": one, "whole_nodes": int(one_cp.steps["nodes"][0]),
            "hta_whole_s": h.get("seconds"), "hta_whole_nodes": h.get("nodes"), "hta_error": h.get("error"),
        })
        print(whole[-1], flush=True)
    return rows, whole


def markdown(rows: list[dict[str, Any]], whole: list[dict[str, Any]], repeat: int) -> str:
    packages = ("polars", "networkx", "HolisticTraceAnalysis", "pandas")
    out = [
        machine_line(sys.executable, packages, [("after the runs", load_average())]),
        "",
        "Building a step's dependency graph and finding its longest path (`scripts/bench_critical_path.py`), side by",
        "side with Holistic Trace Analysis' `critical_path_analysis` on the same window of the same, already parsed",
        f"trace (HTA's window is the annotation instance's CPU range; tracekit uses the same range). Fastest of {repeat} runs",
        "each, tracekit timed before and after HTA so both see the machine in the same state.",
        "",
        "| trace | window | events in trace | tracekit nodes / edges | tracekit (s) | HTA nodes | HTA (s) | speed-up |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    speedups = []
    for r in rows:
        hta = "error" if r["hta_error"] else ("—" if r["hta_s"] is None else f"{r['hta_s']:.3f}")
        ratio = None if not r["hta_s"] else r["hta_s"] / r["tracekit_s"]
        if ratio is not None:
            speedups.append(ratio)
        out.append(
            f"| {r['trace']} | #{r['instance']} ({r['window_ms']:,.1f} ms) | {r['events']:,} | {r['nodes']:,} / {r['edges']:,} | "
            f"{r['tracekit_s']:.3f} | {r['hta_nodes'] or '—'} | {hta} | {'—' if ratio is None else f'{ratio:.1f}×'} |"
        )
    out.append("")
    if speedups:
        out.append(
            f"Speed-up over HTA per window: median {statistics.median(speedups):.1f}×, lowest {min(speedups):.1f}×, "
            f"highest {max(speedups):.1f}× ({len(speedups)} windows)."
        )
        by_trace: dict[str, list[float]] = {}
        for r in rows:
            if r["hta_s"]:
                by_trace.setdefault(r["trace"], []).append(r["hta_s"] / r["tracekit_s"])
        parts = [f"{name} {min(v):.1f}–{max(v):.1f}×" for name, v in by_trace.items()]
        floor = min(r["tracekit_s"] for r in rows)
        reached = sum(1 for v in speedups if v >= 5.0)
        out += [
            "",
            "Per trace: " + ", ".join(parts) + ".",
            "",
            f"The 5× target is reached in {reached} of {len(speedups)} windows. tracekit has a fixed cost of",
            f"about {floor:.2f} s per window: some 500 small polars operations (clipping, joins, as-of joins)",
            "whose per-operation overhead does not shrink with the window. On small windows that cost",
            "dominates, while HTA's work is proportional to the events, so the speed-up is lowest there.",
            "HTA's own times vary two- to threefold between runs on this shared machine, which moves the",
            "ratios as much. `tracekit analyze` pays the fixed cost once per trace, not once per step (the",
            "whole-trace row below).",
        ]
        out.append("")
    for w in whole:
        hta = "error: " + w["hta_error"] if w["hta_error"] else ("not run" if w["hta_whole_s"] is None else f"{w['hta_whole_s']:.2f} s ({w['hta_whole_nodes']:,} nodes)")
        per_step = [r["hta_s"] for r in rows if r["trace"] == w["trace"] and r["hta_s"]]
        hta_steps = f" (HTA: {sum(per_step):.2f} s for the {len(per_step)} step windows above)" if per_step else ""
        out += [
            f"**The largest shared CUDA trace** ({w['trace']}, {w['events']:,} events): the critical path of all "
            f"{w['steps']} steps takes {w['all_steps_s']:.2f} s{hta_steps}; with the what-ifs of every finding kind "
            f"({w['what_ifs']}) {w['all_steps_what_ifs_s']:.2f} s. The whole trace as one window takes "
            f"{w['whole_window_s']:.2f} s ({w['whole_nodes']:,} nodes); HTA on the whole trace (`annotation=\"\"`): {hta}.",
            "",
        ]
    out += [
        "Where the time goes: nearly all in polars (clipping events to the window, cutting each thread's",
        "timeline at every event boundary, the as-of joins that find launches, sync sources and cross-stream",
        "waits); the longest paths themselves run in a C kernel (tracekit/native/_dag.c; networkx, about",
        "half of the time before it, stays the fallback), after",
        "contracting every run of a thread's stretches and every activity + stream gap into single edges",
        "(about a third of the nodes remain). The graphs are not comparable one to one: HTA keeps a start and an",
        "end node per event and drops untraced host time; tracekit's nodes are the instants something",
        "depends on (docs/critical-path.md).",
    ]
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one trace only")
    parser.add_argument("--timeout", type=int, default=900, help="seconds allowed to HTA per trace")
    args = parser.parse_args()
    if not SHARED.is_dir():
        print(f"the shared traces are not here: {SHARED}", file=sys.stderr)
        return 1
    rows, whole = run(args.repeat, args.quick, args.timeout)
    print(markdown(rows, whole, args.repeat))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
