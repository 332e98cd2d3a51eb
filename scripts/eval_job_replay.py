"""Evaluate the job model (tracekit/analysis/job_replay.py) against the multi-rank simulator.

For every simulated job of tests/loopsim/jobsim.py: the job is written as one Kineto trace per
rank, diagnosed with ``diagnose_job``, and every job-level what-if that has a program edit is
compared with the job re-simulated with that edit.  Prints a Markdown table (``--json FILE``
also writes the rows as JSON).

Usage::

    python scripts/eval_job_replay.py [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from loopsim.fixes import FIXES  # noqa: E402
from loopsim.jobsim import (  # noqa: E402
    JOBS,
    fix_rank,
    free_communication,
    half_buckets,
    simulate_job,
    straggler_at_median,
    write_job,
)

from tracekit.analysis.diagnose import diagnose_job  # noqa: E402
from tracekit.reading.job import read_job  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in JOBS.items():
            run = simulate_job(spec)
            jd = diagnose_job(read_job(write_job(run, Path(tmp) / name), cache=False))
            m = jd.model
            if m is None or m.step_ms is None:
                print(f"{name}: no job model", file=sys.stderr)
                continue
            rows.append({"job": name, "what_if": "(unchanged)", "predicted_ms": m.replayed_step_ms, "truth_ms": run.steady_step_ns / 1e6})
            for w in m.what_ifs:
                if w.kind == "straggler_at_median" and w.rank is not None:
                    typical = next(r for r in range(spec.world_size) if r != w.rank and spec.loops[r] == spec.loops[0 if w.rank else 1])
                    edited = straggler_at_median(spec, w.rank, typical)
                elif w.kind == "perfect_overlap":
                    edited = free_communication(spec)
                elif w.kind == "half_collectives":
                    edited = half_buckets(spec)
                elif w.kind == "cause_on_rank" and w.cause in FIXES and w.rank is not None:
                    edited = fix_rank(spec, w.rank, w.cause)
                elif w.kind == "cause_everywhere" and w.cause in FIXES:
                    edited = spec
                    for rank in range(spec.world_size):
                        edited = fix_rank(edited, rank, w.cause)
                else:
                    continue
                rows.append({"job": name, "what_if": w.label, "predicted_ms": w.predicted_step_ms, "truth_ms": simulate_job(edited).steady_step_ns / 1e6})
    for r in rows:
        r["error"] = abs(r["predicted_ms"] - r["truth_ms"]) / r["truth_ms"]
    print("| job | what-if | predicted ms | re-simulated ms | error |")
    print("|---|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['job']} | {r['what_if']} | {r['predicted_ms']:.2f} | {r['truth_ms']:.2f} | {100 * r['error']:.2f}% |")
    errs = [r["error"] for r in rows if r["what_if"] != "(unchanged)"]
    if errs:
        print(f"\nwhat-ifs: {len(errs)}, mean error {100 * statistics.mean(errs):.2f}%, max {100 * max(errs):.2f}%")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
