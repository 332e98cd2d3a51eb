"""The replay's cost: ``price`` (tracekit/analysis/replay.py) of every modelled fix on a trace.

For each trace, a fresh child process reads it (no cache), finds its steps and prices every
fix of :data:`FIX_MODELS` the way ``diagnose`` does (a bounded sample of groups on traces over
300,000 events); it reports the CPU seconds of ``price`` (``time.process_time``: all threads
of the child, so other people's jobs on a shared machine do not count), split into building
the groups' graphs (``build_graph``, the critical path's builder) and the replay's own work
(ordering, edits, sweeps, step bounds), once with the native sweeps and once with
``TRACEKIT_PURE_PYTHON=1``; the prices of both runs must be equal.

    python scripts/bench_replay.py /tmp/tracekit-bench/df_index_resolver_256mb.json
    python scripts/bench_replay.py TRACE ... --repeat 3      # the fastest of 3 calls per child
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from benchmachine import load_average, machine_line

_CHILD = r"""
import json, sys, time
import polars as pl
import tracekit
from tracekit.analysis import replay as R
from tracekit.analysis.steps import find_steps
from tracekit.analysis.sweep import native_available

path, repeat = sys.argv[1], int(sys.argv[2])
tables = tracekit.read_trace(path, cache=False)
steps = find_steps(tables.events, tables.links).frame
complete = steps.filter(pl.col("complete"))
step_ms = float(complete["dur_ns"].median()) / 1e6 if complete.height else None
spent = {"graph": 0.0}
build = R.build_graph

def timed_build(*args, **kwargs):
    t = time.process_time()
    try:
        return build(*args, **kwargs)
    finally:
        spent["graph"] += time.process_time() - t

R.build_graph = timed_build
best = None
for _ in range(repeat):
    spent["graph"] = 0.0
    t = time.process_time()
    pricing = R.price(list(R.FIX_MODELS), tables.events, tables.links, steps, step_ms)
    total = time.process_time() - t
    if best is None or total < best[0]:
        best = (total, spent["graph"])
groups = 0 if pricing.replay is None else int((~pricing.replay.steps["steady"]).sum())
print(json.dumps({
    "events": tables.events.height, "native": native_available(), "price_s": best[0], "graph_s": best[1],
    "groups": groups, "fixes": sorted((k, round(v[0], 6), round(v[1], 6)) for k, v in pricing.fixes.items()),
    "error": pricing.replay.error if pricing.replay is not None else None,
}))
"""


def run(path: Path, pure: bool, repeat: int) -> dict[str, object]:
    env = dict(os.environ)
    env.pop("TRACEKIT_PURE_PYTHON", None)
    if pure:
        env["TRACEKIT_PURE_PYTHON"] = "1"
    out = subprocess.run([sys.executable, "-c", _CHILD, str(path), str(repeat)], env=env, check=True, capture_output=True, text=True)
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--repeat", type=int, default=1, help="price calls per child; the fastest counts")
    args = ap.parse_args(argv)
    machine = machine_line(sys.executable, loads=[("before", load_average())])
    print(f"{machine} POLARS_MAX_THREADS={os.environ.get('POLARS_MAX_THREADS', 'unset')}.\n")
    print("| trace | events | groups | native sweeps: price CPU s (graphs + replay) | pure Python: price CPU s (graphs + replay) |")
    print("|---|--:|--:|--:|--:|")
    status = 0
    for path in args.traces:
        fast, slow = run(path, False, args.repeat), run(path, True, args.repeat)
        if fast["fixes"] != slow["fixes"] or fast["error"] != slow["error"]:
            print(f"{path}: prices differ between the native and the pure-Python sweeps", file=sys.stderr)
            status = 1

        def cell(r: dict[str, object]) -> str:
            total, graph = float(r["price_s"]), float(r["graph_s"])  # type: ignore[arg-type]
            return f"{total:.2f} ({graph:.2f} + {total - graph:.2f})"

        built = "" if fast["native"] else " (native module not built: both pure Python)"
        print(f"| {path.name} | {fast['events']:,} | {fast['groups']} | {cell(fast)}{built} | {cell(slow)} |", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
