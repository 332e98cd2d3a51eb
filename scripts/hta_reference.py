"""Record Holistic Trace Analysis' numbers for the shared Kineto traces (tests/data/hta_reference.json).

tracekit's tests cross-check its Kineto parser against these numbers
(tests/test_hta_crosscheck.py) without needing HTA installed.  Run in the benchmark venv
(scripts/bench_env.sh), from the repository root:

    .bench-venv/bin/python scripts/hta_reference.py            # every .json/.json.gz under ../shared/traces
    .bench-venv/bin/python scripts/hta_reference.py --only hta/tests/data/ns_resolution_trace

Each trace is loaded in its own subprocess (a crash or a hang in HTA costs only that file).
Per rank it records, from HTA's parser (``hta.common.trace.parse_trace_file``: the whole
trace, before ``TraceAnalysis`` drops incomplete iterations):

* event count, and count and summed ``dur`` per category;
* kernel, memcpy and memset counts and summed durations, with tracekit's grouping of
  categories (kernel: ``kernel``/``Kernel``/``mtia_ccp_events``; memcpy:
  ``gpu_memcpy``/``Memcpy``; memset: ``gpu_memset``/``Memset``);

and, from ``TraceAnalysis`` (which keeps only the complete ProfilerStep iterations when a
trace has two or more), the temporal breakdown and the per-stream idle-time breakdown.

Units are in the key names.  HTA keeps integer µs: when a trace's ``ts`` are floats (ns
resolution) it rounds every event to ``ceil(ts)`` … ``floor(ts + dur)`` before anything
else, so its durations are up to 2 µs shorter per event than the exact ones.  A file HTA
cannot load gets an entry with the error text.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gzip
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"
OUTPUT = ROOT / "tests" / "data" / "hta_reference.json"
RESULT_TAG = "HTA_REFERENCE "

GROUPS = {
    "kernel": ("kernel", "mtia_ccp_events"),
    "memcpy": ("gpu_memcpy", "memcpy"),
    "memset": ("gpu_memset", "memset"),
}


def _number(x: Any) -> int | float | None:
    """A plain JSON number: integral values as int, NaN as None."""
    if x is None:
        return None
    x = float(x)
    if math.isnan(x):
        return None
    return int(x) if x.is_integer() else round(x, 6)


class _Ts(msgspec.Struct):
    ts: Any = None


class _TsDocument(msgspec.Struct):
    traceEvents: list[_Ts] = msgspec.field(default_factory=list)


def _float_ts(path: Path) -> bool:
    """Whether any event's ts is written as a float (what makes HTA round to µs)."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    try:
        events = msgspec.json.decode(data, type=_TsDocument).traceEvents
    except msgspec.DecodeError:
        return False
    return any(isinstance(e.ts, float) for e in events)


def _parser_numbers(path: Path) -> dict[str, dict[str, Any]]:
    """Counts and duration sums from HTA's parser, per rank."""
    from hta.common.trace import parse_trace_file

    meta, df, symbols = parse_trace_file(str(path))
    table = symbols.get_sym_table()
    cats = df["cat"].map(lambda i: table[i])
    rank = meta.get("distributedInfo", {}).get("rank", 0) if isinstance(meta, dict) else 0
    by_cat: dict[str, dict[str, Any]] = {}
    for cat, group in df.groupby(cats, sort=True):
        by_cat[str(cat)] = {"count": len(group), "dur_us_sum": _number(group["dur"].sum())}
    out: dict[str, Any] = {"events": len(df), "categories": by_cat}
    for key, names in GROUPS.items():
        mask = cats.str.lower().isin(names)
        out[f"{key}_count"] = int(mask.sum())
        out[f"{key}_dur_us_sum"] = _number(df.loc[mask, "dur"].sum())
    return {str(rank): out}


def _analysis_numbers(path: Path) -> dict[str, dict[str, Any]]:
    """Temporal and idle-time breakdowns from TraceAnalysis (its iteration-filtered view)."""
    from hta.trace_analysis import TraceAnalysis

    folder = Path(tempfile.mkdtemp(prefix="hta-ref-"))
    name = "rank-0.json.gz" if path.name.endswith(".gz") else "rank-0.json"
    (folder / name).symlink_to(path.resolve())
    analysis = TraceAnalysis(trace_dir=str(folder))
    out: dict[str, dict[str, Any]] = {}
    for rank, df in analysis.t.traces.items():
        entry: dict[str, Any] = {"events_after_iteration_filter": len(df)}
        try:
            tb = analysis.get_temporal_breakdown(visualize=False)
            row = tb[tb["rank"] == rank].iloc[0]
            entry["temporal_breakdown"] = {
                "idle_time_us": _number(row["idle_time(us)"]),
                "compute_time_us": _number(row["compute_time(us)"]),
                "non_compute_time_us": _number(row["non_compute_time(us)"]),
                "kernel_time_us": _number(row["kernel_time(us)"]),
            }
        except Exception as exc:
            entry["temporal_breakdown_error"] = f"{type(exc).__name__}: {exc}"[:300]
        try:
            idle = analysis.get_idle_time_breakdown(ranks=[rank], visualize=False)
            frame = idle[0] if isinstance(idle, tuple) else idle
            entry["idle_time_breakdown"] = [
                {
                    "stream": int(r["stream"]),
                    "idle_category": str(r["idle_category"]),
                    "idle_time_us": _number(r["idle_time"]),
                }
                for _, r in frame.iterrows()
            ]
        except Exception as exc:
            entry["idle_time_breakdown_error"] = f"{type(exc).__name__}: {exc}"[:300]
        out[str(rank)] = entry
    return out


def child(path: Path) -> None:
    import logging

    logging.disable(logging.WARNING)
    result: dict[str, Any]
    try:
        ranks = _parser_numbers(path)
    except Exception as exc:
        result = {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:500]}
    else:
        result = {"status": "ok", "ts_float": _float_ts(path), "ranks": ranks}
        try:
            views = _analysis_numbers(path)
        except Exception as exc:
            result["trace_analysis_error"] = f"{type(exc).__name__}: {exc}"[:500]
        else:
            for rank, extra in views.items():
                result["ranks"].setdefault(rank, {}).update({"trace_analysis": extra})
    print(RESULT_TAG + json.dumps(result), flush=True)


def run_one(path: Path, timeout_s: float) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(path)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return {"status": "error", "error": f"HTA did not finish in {timeout_s:.0f} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG) :])
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    return {"status": "error", "error": (lines[-1] if lines else f"exit status {proc.returncode}")[:500]}


def find_traces(root: Path) -> list[Path]:
    found = [p for p in root.rglob("*") if p.is_file() and (p.name.endswith(".json") or p.name.endswith(".json.gz"))]
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=Path, default=SHARED, help="root of the shared traces (default ../shared/traces)")
    ap.add_argument("--only", nargs="*", default=None, help="relative paths (or folder prefixes) to record")
    ap.add_argument("--output", type=Path, default=OUTPUT)
    ap.add_argument("--timeout", type=float, default=600, help="seconds per file")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child)
        return 0

    try:
        from importlib.metadata import version

        hta_version = version("HolisticTraceAnalysis")
        pandas_version = version("pandas")
    except Exception:
        print("HTA is not installed here: run scripts/bench_env.sh and use .bench-venv/bin/python", file=sys.stderr)
        return 1
    if not args.traces.is_dir():
        print(f"no traces at {args.traces}", file=sys.stderr)
        return 1

    previous: dict[str, Any] = {}
    if args.only and args.output.exists():
        previous = json.loads(args.output.read_text(encoding="utf-8")).get("traces", {})
    traces: dict[str, Any] = dict(previous)
    for path in find_traces(args.traces):
        rel = path.relative_to(args.traces).as_posix()
        if args.only and not any(rel.startswith(prefix) for prefix in args.only):
            continue
        entry = run_one(path, args.timeout)
        traces[rel] = entry
        if entry["status"] == "ok":
            summary = "; ".join(
                f"rank {r}: {v.get('kernel_count')} kernels {v.get('kernel_dur_us_sum')} µs"
                for r, v in entry["ranks"].items()
            )
        else:
            summary = "error: " + entry["error"]
        print(f"{rel}: {summary}", file=sys.stderr, flush=True)

    doc = {
        "generated_by": "scripts/hta_reference.py",
        "generated_at": _dt.datetime.now().astimezone().strftime("%Y-%m-%d"),
        "hta_version": hta_version,
        "pandas_version": pandas_version,
        "python_version": platform.python_version(),
        "traces_root": "../shared/traces (relative to the repository root); keys below are relative to it",
        "notes": [
            "Counts and *_dur_us_sum come from HTA's parser (hta.common.trace.parse_trace_file) over the whole "
            "trace; rows without dur or cat, and cat 'Trace', are dropped by HTA.",
            "kernel = categories kernel/Kernel/mtia_ccp_events; memcpy = gpu_memcpy/Memcpy; memset = "
            "gpu_memset/Memset (case-insensitive), the same grouping as tracekit's event kinds.",
            "HTA works in integer microseconds. When ts_float is true (ns-resolution trace) HTA rounds each "
            "event to ceil(ts) .. floor(ts + dur) and sets dur = floor(ts + dur) - ceil(ts), so each HTA "
            "duration is between 0 and 2 us shorter than the exact one (and may be negative for sub-us "
            "events); comparisons need a tolerance there. With integer ts the numbers are exact.",
            "trace_analysis holds TraceAnalysis(trace_dir=...) results: with two or more ProfilerSteps HTA "
            "keeps only the complete iterations (the last step and GPU rows launched outside them are "
            "dropped) before computing the temporal and idle-time breakdowns.",
        ],
        "traces": dict(sorted(traces.items())),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.output.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, args.output)
    ok = sum(1 for v in traces.values() if v.get("status") == "ok")
    print(f"wrote {args.output} ({ok} loaded, {len(traces) - ok} with errors)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
