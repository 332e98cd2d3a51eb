"""Whole-analysis benchmark: `tracekit analyze` of scaled Kineto traces, against the project's budget.

Each run is ``tracekit analyze --no-cache --quiet --format json`` of a scaled trace (built by
``scripts/scale_kineto.py`` into ``--scale-dir`` when missing), or of a trace file named on the
command line, in a fresh child process.  The parent measures, for that child alone:

* wall seconds (start to exit),
* CPU seconds (the child's user + system time from ``wait4``; the machine is shared, so CPU
  time shows how much work was done when the wall clock is inflated by other people's jobs),
* peak RSS: the child's ``ru_maxrss`` from ``wait4`` (the parent stays small, so the high-water
  mark the child inherits at exec is far below what it reaches).

With ``--batch`` it also runs ``scripts/bench_batch.py`` (no Ray) and takes its 1 → 2 worker
speed-up.  The table (each budget met / not met, with the measured number; files named on the
command line are measured without a budget) goes to stdout under the machine line.

    python scripts/bench_analyze.py                          # 1 GB and 2 GB, one run each
    python scripts/bench_analyze.py --sizes 1024 --batch     # 1 GB and the batch speed-up
    python scripts/bench_analyze.py --sizes 256 ../shared/traces/param/resnet_kineto.json.gz
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from benchmachine import compile_tracekit, load_average, machine_line

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT.parent / "shared" / "traces" / "hta" / "tests" / "data" / "df_index_resolver" / "df_index_resolver.json.gz"
#: the whole-analysis budget on 2 cores: scaled size in MB → (seconds, peak RSS in GB)
BUDGET = {1024: (30.0, 2.0), 2048: (60.0, 4.0)}
TARGET_SPEEDUP = 1.8


def scaled(size_mb: int, out_dir: Path) -> Path:
    """The scaled trace of ``size_mb`` (built on first use; scale_kineto names it)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import scale_kineto

    path = scale_kineto.scaled_path(SOURCE, size_mb, out_dir)
    if not path.exists():
        out_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "scale_kineto.py"), "--size-mb", str(size_mb), "--out-dir", str(out_dir)],
            check=True, cwd=ROOT,
        )
    return Path(path)


def analyze_once(trace: Path, out: Path, timeout_s: float) -> dict[str, float | str]:
    """One ``tracekit analyze`` in a child: wall s, CPU s, peak RSS MB (or an error)."""
    cmd = [sys.executable, "-m", "tracekit", "analyze", "--no-cache", "--quiet", "--format", "json", "--out", str(out), str(trace)]
    err_path = out.with_suffix(".stderr")
    t0 = time.perf_counter()
    # stderr goes to a file: a pipe nobody reads until the end could fill and stall the child
    with err_path.open("wb") as err_file:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err_file)
    deadline = t0 + timeout_s
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            return {"error": f"did not finish in {timeout_s:.0f} s"}
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = err_path.read_text(errors="replace")
    if proc.returncode != 0:
        return {"error": f"exit {proc.returncode}: {err.strip()[-300:]}"}
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024}


def batch_speedup(copies: int) -> float | None:
    """The 1 → 2 worker speed-up measured by bench_batch.py (fastest of one run each)."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_batch.py"), "--copies", str(copies), "--repeat", "1", "--no-ray"],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )
    m = re.search(r"Speed-up from 1 to 2 workers: \*\*([0-9.]+)×", proc.stdout)
    if m is None:
        print(proc.stdout[-2000:], proc.stderr[-2000:], file=sys.stderr)
        return None
    return float(m.group(1))


def _mark(ok: bool) -> str:
    return "met" if ok else "**NOT met**"


def _fastest(trace: Path, out: Path, repeat: int, timeout_s: float) -> dict[str, float | str]:
    """The fastest of ``repeat`` analyses of ``trace`` (an error when none finished)."""
    best: dict[str, float | str] | None = None
    for _ in range(max(repeat, 1)):
        r = analyze_once(trace, out, timeout_s)
        print(f"{trace.name}: {json.dumps(r)} (load {load_average():.1f})", file=sys.stderr, flush=True)
        if best is None or ("wall_s" in r and ("wall_s" not in best or float(r["wall_s"]) < float(best["wall_s"]))):
            best = r
    assert best is not None
    best["json_mb"] = trace.stat().st_size / 1e6
    return best


def _row(what: str, r: dict[str, float | str], budget: tuple[float, float] | None) -> tuple[str, dict[str, object] | None]:
    """One table line, and its target row (None for a trace measured without a budget)."""
    target = f"< {budget[0]:.0f} s, < {budget[1]:.0f} GB" if budget else "no target"
    if "error" in r:
        line = f"| {what} | {r['error']} | {target} | {'**NOT met**' if budget else '–'} | n/a |"
        return line, ({"what": what, "measured": str(r["error"]), "target": target, "met": False} if budget else None)
    wall, cpu, rss = float(r["wall_s"]), float(r["cpu_s"]), float(r["rss_mb"])
    measured = f"{wall:.1f} s wall ({cpu:.1f} s CPU), {rss / 1024:.2f} GB peak RSS"
    if budget is None:
        return f"| {what} | {measured} | no target | – | – |", None
    secs, gb = budget
    line = f"| {what} | {measured} | {target} | {_mark(wall < secs)} | {_mark(rss / 1024 < gb)} |"
    return line, {"what": what, "measured": measured, "target": target, "met": wall < secs and rss / 1024 < gb}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*", type=Path, help="trace files to analyse too (measured, no budget)")
    ap.add_argument("--sizes", default="1024,2048", help="scaled trace sizes in MB (default 1024,2048; '' for none)")
    ap.add_argument("--scale-dir", type=Path, default=Path("/tmp/tracekit-bench"), help="where scaled traces are (or go)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per trace; the fastest counts (default 1)")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds one analysis may take (default 1200)")
    ap.add_argument("--batch", action="store_true", help="also measure the batch 1 → 2 worker speed-up")
    ap.add_argument("--batch-copies", type=int, default=6, help="archive runs for --batch (default 6: 108 traces)")
    ap.add_argument("--targets-json", type=Path, help="also write the target rows here (scripts/bench_targets.py)")
    args = ap.parse_args(argv)

    missing = [str(p) for p in args.traces if not p.is_file()]
    if missing:
        ap.error("no such trace file: " + ", ".join(missing))
    compile_tracekit(sys.executable)  # (as a pip install leaves it: see scripts/benchmachine.py)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    runs: list[tuple[str, Path, tuple[float, float] | None]] = []
    for size in sizes:
        trace = scaled(size, args.scale_dir)
        what = f"`analyze` of a {trace.stat().st_size / 1e9:.2f} GB Kineto trace ({size} MB scaled), 2 cores"
        runs.append((what, trace, BUDGET.get(size)))
    runs += [(f"`analyze` of {p.name} ({p.stat().st_size / 1e6:.1f} MB on disk)", p, None) for p in args.traces]
    load_before = load_average()
    args.scale_dir.mkdir(parents=True, exist_ok=True)
    lines = ["| what | measured (this run) | target | time | memory |", "|---|---|---|---|---|"]
    targets: list[dict[str, object]] = []
    for i, (what, trace, budget) in enumerate(runs):
        line, target = _row(what, _fastest(trace, args.scale_dir / f"analyze_{i}.json", args.repeat, args.timeout), budget)
        lines.append(line)
        if target is not None:
            targets.append(target)
    if args.batch:
        speedup = batch_speedup(args.batch_copies)
        shown = f"{speedup:.2f}×" if speedup is not None else "failed"
        what = f"batch speed-up 1 → 2 workers ({args.batch_copies * 18} synthetic traces)"
        ok = speedup is not None and speedup >= TARGET_SPEEDUP
        lines.append(f"| {what} | {shown} | ≥ {TARGET_SPEEDUP}× | {_mark(ok)} | – |")
        targets.append({"what": what, "measured": shown, "target": f"≥ {TARGET_SPEEDUP}×", "met": ok})
    if args.targets_json:
        args.targets_json.write_text(json.dumps(targets, indent=1), encoding="utf-8")
    # the children inherit this environment, so the machine line's native modules are theirs
    machine = machine_line(sys.executable, loads=[("before", load_before), ("after", load_average())])
    note = (
        f"Fastest of {max(args.repeat, 1)} run(s) per trace, each a fresh `tracekit analyze --no-cache --quiet "
        "--format json` process; wall-clock times carry other people's work on a shared machine, CPU time is the "
        "analysis' own."
    )
    print("\n".join([machine, "", note, "", *lines]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
