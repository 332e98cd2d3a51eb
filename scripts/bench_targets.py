"""The whole targets table (parsing, the cache, Nsight, the whole analysis, batch) in one run.

Runs, one after the other in this process' children (never two benchmarks at once, so they do
not compete for the two cores):

1. ``scripts/bench_parse.py``: the four large shared Kineto traces (tracekit, the bare msgspec
   decode, HTA's load, tracekit's cache) and the Nsight exports;
2. ``scripts/bench_analyze.py --batch``: ``tracekit analyze`` of the 1 GB and 2 GB scaled traces
   and the batch 1 → 2 worker speed-up.

Each script prints its own detailed tables as it goes; this one then collects their target rows
into a single Markdown table on stdout, under the machine line (the load average and the
machine's speed read before, between and after).  docs/performance.md quotes the results.

    .bench-venv/bin/python scripts/bench_targets.py            # everything (about 15-20 min quiet)
    .bench-venv/bin/python scripts/bench_targets.py --sizes 1024 --repeat 2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmachine import load_average, machine_line, speed

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"


def _run(cmd: list[str], log: Any) -> int:
    log("$ " + " ".join(cmd[1:]))
    return subprocess.run(cmd, cwd=ROOT, check=False).returncode


def _rows(path: Path, source: str, rc: int) -> list[dict[str, Any]]:
    if path.exists():
        return list(json.loads(path.read_text(encoding="utf-8")))
    return [{"what": f"{source} (failed: exit {rc}, no rows)", "measured": "not measured", "target": "–", "met": None}]


def render(rows: list[dict[str, Any]], machine: str) -> str:
    lines = [machine, "", "| what | measured (this run) | target | verdict |", "|---|---|---|---|"]
    for r in rows:
        verdict = "n/a" if r["met"] is None else ("met" if r["met"] else "**NOT met**")
        lines.append(f"| {r['what']} | {r['measured']} | {r['target']} | {verdict} |")
    met = sum(1 for r in rows if r["met"])
    lines += ["", f"{met} of {len(rows)} targets met in this run."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # seven, not three: a single fresh-process parse of the smallest trace varies by a quarter
    # on the project's 2-core VM (a first touch of fresh memory there sometimes costs tens of
    # ms), and a median of three still caught such runs; every tool gets the same count
    ap.add_argument("--repeat", type=int, default=7, help="parse runs per tool and trace (default 7)")
    ap.add_argument("--sizes", default="1024,2048", help="scaled sizes for the whole analysis (default 1024,2048)")
    ap.add_argument("--analyze-repeat", type=int, default=1, help="analyze runs per size, fastest counts (default 1)")
    ap.add_argument("--batch-copies", type=int, default=6, help="archive runs for the batch speed-up (default 6)")
    args = ap.parse_args(argv)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    loads = [("before", load_average())]
    speeds = [("before", speed(sys.executable))]
    with tempfile.TemporaryDirectory(prefix="tracekit-targets-") as tmp:
        parse_json, analyze_json = Path(tmp) / "parse.json", Path(tmp) / "analyze.json"
        rc_parse = _run(
            [sys.executable, str(SCRIPTS / "bench_parse.py"), "--repeat", str(args.repeat), "--targets-json", str(parse_json)],
            log,
        )
        loads.append(("between", load_average()))
        speeds.append(("between", speed(sys.executable)))
        rc_analyze = _run(
            [
                sys.executable, str(SCRIPTS / "bench_analyze.py"), "--sizes", args.sizes, "--repeat", str(args.analyze_repeat),
                "--batch", "--batch-copies", str(args.batch_copies), "--targets-json", str(analyze_json),
            ],
            log,
        )
        loads.append(("after", load_average()))
        speeds.append(("after", speed(sys.executable)))
        rows = _rows(parse_json, "bench_parse.py", rc_parse) + _rows(analyze_json, "bench_analyze.py", rc_analyze)
    packages = ("polars", "msgspec", "pandas", "HolisticTraceAnalysis")
    print(render(rows, machine_line(sys.executable, packages, loads, speeds)))
    return 0 if rc_parse == 0 and rc_analyze == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
