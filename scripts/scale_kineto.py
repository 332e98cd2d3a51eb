"""Build a large Kineto trace for benchmarking by replicating a real one.

The replication unit is the real trace's ProfilerStep windows: every CPU-side event that
starts between the first ``ProfilerStep#`` start and the last one's end, plus the GPU rows
and launch flows whose correlation id belongs to a launch in that window (so a kernel that
runs after the window closes still comes with its launch).  A trace without ProfilerStep
markers is replicated whole.  Copy *k* is shifted later by *k* times the unit's extent (so
copies never overlap on a stream), its correlation, External id, flow, sequence and Python
ids by *k* times the largest id in use (so every link stays one-to-one inside its copy),
and ``ProfilerStep#N`` is renumbered so steps stay unique.  Metadata rows (``ph: M``) are
written once; the whole-trace ``Trace`` span is written once, stretched over all copies.

The output is streamed: the source is decoded once (a few hundred MB of Python objects
for the largest shared trace) and copies are encoded and written batch by batch, so the
big document is never held in memory.  Output goes to /tmp (never into the repository).

    python scripts/scale_kineto.py                          # 256 MB and 1 GB into /tmp/tracekit-bench/
    python scripts/scale_kineto.py --size-mb 512 --gzip     # also write a .json.gz beside it
    python scripts/scale_kineto.py --source other.json.gz --out-dir /tmp/x
"""

from __future__ import annotations

import argparse
import gzip
import math
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = (
    ROOT.parent / "shared" / "traces" / "hta" / "tests" / "data" / "df_index_resolver" / "df_index_resolver.json.gz"
)
DEFAULT_OUT_DIR = Path("/tmp/tracekit-bench")

#: categories (lower-cased) of rows that run on the device and carry the launch's correlation
GPU_CATEGORIES = frozenset(
    ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset", "cuda_sync", "xpu_sync", "mtia_ccp_events")
)
#: flow categories whose id is the launch's correlation id
LAUNCH_FLOWS = frozenset(("ac2g", "async", "async_gpu", "async_cpu_to_gpu"))
#: args that hold ids to shift per copy
ID_ARGS = (
    "correlation",
    "External id",
    "external id",
    "Sequence number",
    "Python id",
    "Python parent id",
    "Record function id",
    "Ev Idx",
    "wait_on_cuda_event_record_corr_id",
)
STEP_PREFIX = "ProfilerStep#"
FLUSH_BYTES = 8 * 1024 * 1024


def scaled_path(source: Path, size_mb: int, out_dir: Path = DEFAULT_OUT_DIR) -> Path:
    stem = source.name.split(".json")[0]
    return out_dir / f"{stem}_{size_mb}mb.json"


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _load(source: Path) -> dict[str, Any]:
    data = source.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    doc = msgspec.json.decode(data)
    if isinstance(doc, list):
        return {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise SystemExit(f"{source}: not a Kineto trace (no traceEvents array)")
    return doc


def _step_number(name: Any) -> int | None:
    if isinstance(name, str) and name.startswith(STEP_PREFIX):
        try:
            return int(name[len(STEP_PREFIX) :])
        except ValueError:
            return None
    return None


def select_unit(events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """The events to replicate, and a description of how they were chosen."""
    body = [e for e in events if isinstance(e, dict) and e.get("ph") != "M" and e.get("cat") != "Trace"]
    steps = [e for e in body if e.get("ph") == "X" and _step_number(e.get("name")) is not None and _num(e.get("ts"))]
    if not steps:
        return body, f"whole trace ({len(body):,} events; no ProfilerStep markers)"
    lo = min(e["ts"] for e in steps)
    hi = max(e["ts"] + (e.get("dur") or 0) for e in steps)

    def in_window(e: dict[str, Any]) -> bool:
        ts = e.get("ts")
        return _num(ts) and lo <= ts <= hi

    def correlation(e: dict[str, Any]) -> Any:
        args = e.get("args")
        return args.get("correlation") if isinstance(args, dict) else None

    def on_gpu(e: dict[str, Any]) -> bool:
        return str(e.get("cat", "")).lower() in GPU_CATEGORIES

    def launch_flow(e: dict[str, Any]) -> bool:
        return e.get("ph") in ("s", "f", "t") and str(e.get("cat", "")).lower() in LAUNCH_FLOWS

    # launches (host rows with a correlation) inside the window decide which GPU rows come along
    launched = {
        correlation(e)
        for e in body
        if in_window(e) and not on_gpu(e) and not launch_flow(e) and correlation(e) is not None
    }
    unit = []
    for e in body:
        if on_gpu(e) and correlation(e) is not None:
            keep = correlation(e) in launched
        elif launch_flow(e):
            keep = e.get("id") in launched
        else:
            keep = in_window(e)
        if keep:
            unit.append(e)
    return unit, f"{len(steps)} ProfilerStep windows ({len(unit):,} of {len(body):,} events)"


def _extent(unit: list[dict[str, Any]]) -> tuple[float, float]:
    starts = [e["ts"] for e in unit if _num(e.get("ts"))]
    ends = [e["ts"] + (e["dur"] if _num(e.get("dur")) else 0) for e in unit if _num(e.get("ts"))]
    return min(starts), max(ends)


def _max_id(unit: list[dict[str, Any]]) -> int:
    best = 0
    for e in unit:
        if _is_int(e.get("id")):
            best = max(best, e["id"])
        args = e.get("args")
        if isinstance(args, dict):
            for key in ID_ARGS:
                v = args.get(key)
                if _is_int(v):
                    best = max(best, v)
    return best


def _shift_ts(ts: Any, shift: int) -> Any:
    if _is_int(ts):
        return ts + shift
    if isinstance(ts, float):
        return round(ts + shift, 3)  # keep Kineto's ns fraction, drop float noise from the add
    return ts


def copy_events(
    unit: list[dict[str, Any]], k: int, time_shift: int, id_shift: int, step_span: int
) -> Iterator[dict[str, Any]]:
    """The unit as copy number ``k`` (0 = unchanged)."""
    if k == 0:
        yield from unit
        return
    dt, di = k * time_shift, k * id_shift
    for e in unit:
        out = dict(e)
        if "ts" in out:
            out["ts"] = _shift_ts(out["ts"], dt)
        if _is_int(out.get("id")):
            out["id"] = out["id"] + di
        step = _step_number(out.get("name"))
        if step is not None:
            out["name"] = f"{STEP_PREFIX}{step + k * step_span}"
        args = out.get("args")
        if isinstance(args, dict) and any(key in args for key in ID_ARGS):
            args = dict(args)
            for key in ID_ARGS:
                v = args.get(key)
                if _is_int(v) and v > 0:  # -1 and 0 mean "none" in Kineto's args
                    args[key] = v + di
            out["args"] = args
        yield out


class _Sink:
    """Writes bytes to the plain file and optionally to a .json.gz beside it."""

    def __init__(self, path: Path, gz: bool):
        self.files: list[BinaryIO] = [open(path, "wb")]  # noqa: SIM115 - closed in close()
        if gz:
            self.files.append(gzip.open(path.with_name(path.name + ".gz"), "wb", compresslevel=3))  # noqa: SIM115
        self.written = 0

    def write(self, data: bytes) -> None:
        for fh in self.files:
            fh.write(data)
        self.written += len(data)

    def close(self) -> None:
        for fh in self.files:
            fh.close()


def build(source: Path, target_bytes: int, out: Path, *, gz: bool = False, log: Any = None) -> dict[str, Any]:
    """Write a trace of at least ``target_bytes`` to ``out``; returns a summary."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    out = out.resolve()
    if out.is_relative_to(ROOT):
        raise SystemExit(f"refusing to write {out} inside the repository; use /tmp")
    started = time.perf_counter()
    doc = _load(source)
    events = doc.pop("traceEvents")
    unit, how = select_unit(events)
    if not unit:
        raise SystemExit(f"{source}: no events to replicate")
    lo, hi = _extent(unit)
    time_shift = math.ceil(hi - lo) + 1
    id_shift = _max_id(unit) + 1
    step_numbers = [n for n in (_step_number(e.get("name")) for e in unit) if n is not None]
    step_span = (max(step_numbers) - min(step_numbers) + 1) if step_numbers else 0
    metadata = [e for e in events if isinstance(e, dict) and e.get("ph") == "M"]
    spans = [e for e in events if isinstance(e, dict) and e.get("cat") == "Trace"]
    del events
    log(f"{source.name}: replicating {how}; extent {time_shift:,} µs, id shift {id_shift:,}")

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    sink = _Sink(tmp, gz)
    encoder = msgspec.json.Encoder()
    try:
        head = encoder.encode(doc)  # top-level metadata first, then the events array
        sink.write(head[:-1] + (b"," if len(head) > 2 else b"") + b'"traceEvents":[\n')
        first = True
        buf = bytearray()

        def emit(e: dict[str, Any]) -> None:
            nonlocal first
            if not first:
                buf.extend(b",\n")
            first = False
            buf.extend(encoder.encode(e))
            if len(buf) >= FLUSH_BYTES:
                sink.write(bytes(buf))
                buf.clear()

        for e in metadata:
            emit(e)
        copies = 0
        while sink.written + len(buf) < target_bytes:
            for e in copy_events(unit, copies, time_shift, id_shift, step_span):
                emit(e)
            copies += 1
        for e in spans:  # the whole-trace span, stretched over every copy
            span = dict(e)
            if _num(span.get("dur")):
                span["dur"] = span["dur"] + (copies - 1) * time_shift
            emit(span)
        sink.write(bytes(buf) + b"\n]}\n")
    except BaseException:
        sink.close()
        tmp.unlink(missing_ok=True)
        raise
    sink.close()
    tmp.replace(out)
    if gz:
        tmp.with_name(tmp.name + ".gz").replace(out.with_name(out.name + ".gz"))
    summary = {
        "path": str(out),
        "bytes": sink.written,
        "copies": copies,
        "events": len(metadata) + len(spans) + copies * len(unit),
        "unit": how,
        "seconds": round(time.perf_counter() - started, 1),
    }
    log(
        f"wrote {out} ({sink.written / 1e6:,.0f} MB, {copies} copies, {summary['events']:,} events) "
        f"in {summary['seconds']} s"
    )
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="real Kineto trace to replicate")
    ap.add_argument(
        "--size-mb", type=int, nargs="+", default=[256, 1024], help="target sizes in MiB (default 256 1024)"
    )
    ap.add_argument("--out-dir", type=Path, default=DEFAULT_OUT_DIR, help="output folder (default /tmp/tracekit-bench)")
    ap.add_argument("--gzip", action="store_true", help="also write <name>.json.gz")
    ap.add_argument("--force", action="store_true", help="rebuild files that already exist")
    args = ap.parse_args(argv)
    for size in args.size_mb:
        out = scaled_path(args.source, size, args.out_dir)
        if out.exists() and not args.force:
            print(f"{out} exists (use --force to rebuild)", file=sys.stderr)
            continue
        build(args.source, size * 1024 * 1024, out, gz=args.gzip)
    return 0


if __name__ == "__main__":
    sys.exit(main())
