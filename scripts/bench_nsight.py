"""Measure the Nsight Systems reader: MB/s and peak memory per export.

Reads each real export in ../shared/traces/nsight and the scaled export built by
scripts/scale_nsight.py (built first when missing), each in a fresh child process so that
peak RSS (``resource.getrusage(...).ru_maxrss``) belongs to that file alone.  Prints a
Markdown table under the machine line, and the 1-minute load average after: on a shared
machine the wall-clock column carries other people's work, the CPU column (user + system
time of the fastest read, all threads) does not.

    python scripts/bench_nsight.py                 # real exports + ~100 MB scaled export
    python scripts/bench_nsight.py --repeat 5 some.sqlite other.sqlite
"""

from __future__ import annotations

import argparse
import json
import resource
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from benchmachine import load_average, machine_line

ROOT = Path(__file__).resolve().parents[1]
NSIGHT = ROOT.parent / "shared" / "traces" / "nsight"
REAL = [
    NSIGHT / "pipit" / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
    NSIGHT / "pipit" / "perlmutter-cloverleaf-cuda.sqlite",
    NSIGHT / "nsys-ai" / "h100_2gpu_1s.sqlite",
]
SCALED = Path("/tmp/tracekit-bench/h100_2gpu_scaled.sqlite")


def _rss_mb() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024  # bytes on macOS, KiB on Linux


def measure_one(path: Path, repeat: int) -> dict[str, object]:
    """Runs in the child: read ``path`` ``repeat`` times, keep the fastest."""
    from tracekit.parsers.nsight import read_nsight

    rss_before = _rss_mb()
    best = float("inf")
    cpu = 0.0
    events = 0
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        tables = read_nsight(path)
        seconds = time.perf_counter() - t0
        if seconds < best:
            best, cpu = seconds, time.process_time() - c0
        events = tables.events.height
        del tables
    return {"seconds": best, "cpu_seconds": cpu, "rss_before_mb": rss_before, "peak_rss_mb": _rss_mb(), "events": events}


def run_child(path: Path, repeat: int) -> dict[str, float]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", str(path), "--repeat", str(repeat)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return {k: float(v) for k, v in json.loads(out.strip().splitlines()[-1]).items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="*", type=Path, help="exports to measure (default: real + scaled)")
    ap.add_argument("--repeat", type=int, default=3, help="reads per file; the fastest counts")
    ap.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(measure_one(args.one, args.repeat)))
        return 0

    paths = list(args.paths)
    if not paths:
        paths = [p for p in REAL if p.exists()]
        if not SCALED.exists():
            subprocess.run(
                [sys.executable, str(ROOT / "scripts" / "scale_nsight.py"), "--output", str(SCALED)], check=True
            )
        paths.append(SCALED)

    machine = machine_line(sys.executable, ("polars", "adbc-driver-sqlite"), [("before", load_average())])
    print(f"{machine} SQLite {sqlite3.sqlite_version}; the fastest of {args.repeat} reads per export counts.")
    print()
    print("| export | size (MB) | events | read (s) | CPU (s) | MB/s | events/s | RSS after import (MB) | peak RSS (MB) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for path in paths:
        r = run_child(path, args.repeat)
        size = path.stat().st_size / 1e6
        seconds, events = r["seconds"], int(r["events"])
        print(
            f"| {path.name} | {size:.1f} | {events:,} | {seconds:.2f} | {r['cpu_seconds']:.2f} | {size / seconds:.1f} | "
            f"{events / seconds:,.0f} | {r['rss_before_mb']:.0f} | {r['peak_rss_mb']:.0f} |"
        )
    print()
    print(f"1-minute load average {load_average():.2f} after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
