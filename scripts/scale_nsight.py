"""Build a large Nsight Systems SQLite export for benchmarking the reader.

Copies a real export (default: the 2×H100 PyTorch capture in ../shared/traces) into a
scratch folder and doubles the rows of every event table until the file reaches the
target size.  Each doubling appends a copy of the current rows shifted later in time by
the current span of the trace (so copies never overlap) and with correlation ids shifted
past the largest id in use (so the (pid, correlationId) join stays one-to-one).  Lookup
tables (StringIds, ThreadNames, TARGET_INFO_*, ENUM_*) are left alone.

The shared trace is opened read-only; only the copy is written.

    python scripts/scale_nsight.py                      # ~100 MB into /tmp/tracekit-bench/
    python scripts/scale_nsight.py --target-mb 400 --output /tmp/big.sqlite
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = ROOT.parent / "shared" / "traces" / "nsight" / "nsys-ai" / "h100_2gpu_1s.sqlite"
DEFAULT_OUTPUT = Path("/tmp/tracekit-bench/h100_2gpu_scaled.sqlite")

#: tables whose rows are events (replicated); everything else is a lookup table
EVENT_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_DRIVER",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "CUPTI_ACTIVITY_KIND_OVERHEAD",
    "CUPTI_ACTIVITY_KIND_CUDA_EVENT",
    "NVTX_EVENTS",
    "OSRT_API",
    "PROFILER_OVERHEAD",
)
TIME_COLUMNS = ("start", "end", "timestamp")
CORRELATION_COLUMNS = ("correlationId",)


def _tables(con: sqlite3.Connection) -> list[str]:
    names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return [t for t in EVENT_TABLES if t in names]


def _columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]


def _span(con: sqlite3.Connection, tables: list[str]) -> tuple[int, int]:
    """(time shift, correlation shift) that put a copy after everything present."""
    lo, hi, corr = None, 0, 0
    for t in tables:
        cols = _columns(con, t)
        if "start" in cols:
            a, b = con.execute(f'SELECT MIN(start), MAX(COALESCE("end", start)) FROM "{t}"').fetchone()
            if a is not None:
                lo = a if lo is None else min(lo, a)
                hi = max(hi, b)
        if "correlationId" in cols:
            (c,) = con.execute(f'SELECT MAX(correlationId) FROM "{t}"').fetchone()
            corr = max(corr, c or 0)
    span = (hi - (lo or 0)) + 1_000_000  # 1 ms gap between copies
    return span, corr + 1


def double(con: sqlite3.Connection, tables: list[str]) -> None:
    """Append one shifted copy of every event table's rows."""
    shift_t, shift_c = _span(con, tables)
    for t in tables:
        cols = _columns(con, t)
        exprs = []
        for c in cols:
            if c in TIME_COLUMNS:
                exprs.append(f'"{c}" + {shift_t}')
            elif c in CORRELATION_COLUMNS:
                exprs.append(f'"{c}" + {shift_c}')
            elif c == "eventId" and t == "NVTX_EVENTS":
                exprs.append("NULL")  # an INTEGER PRIMARY KEY in 3.30+: let SQLite assign it
            else:
                exprs.append(f'"{c}"')
        col_list = ", ".join(f'"{c}"' for c in cols)
        con.execute(f'INSERT INTO "{t}" ({col_list}) SELECT {", ".join(exprs)} FROM "{t}"')
    con.commit()


def scale(source: Path, output: Path, target_mb: float) -> Path:
    output.parent.mkdir(parents=True, exist_ok=True)
    if output.exists():
        output.unlink()
    shutil.copyfile(source, output)
    output.chmod(0o644)
    con = sqlite3.connect(output)
    try:
        tables = _tables(con)
        if not tables:
            raise SystemExit(f"{source}: no event tables to replicate")
        rounds = 0
        while output.stat().st_size < target_mb * 1e6:
            double(con, tables)
            rounds += 1
            if rounds > 30:
                raise SystemExit("refusing to double more than 30 times")
    finally:
        con.close()
    return output


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="a real Nsight SQLite export")
    ap.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where to write the scaled copy")
    ap.add_argument("--target-mb", type=float, default=100.0, help="stop doubling once the file is this big")
    args = ap.parse_args(argv)
    if not args.source.exists():
        print(f"no such export: {args.source}", file=sys.stderr)
        return 1
    t0 = time.perf_counter()
    out = scale(args.source, args.output, args.target_mb)
    size = out.stat().st_size / 1e6
    print(f"{out}: {size:.1f} MB in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
