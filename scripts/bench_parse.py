"""Kineto parse benchmark: tracekit against a bare typed decode, HTA's loader and the cache.

For each trace, four ways of opening it are timed side by side, each run in its own fresh
Python process so that peak RSS (``ru_maxrss``, read inside the child when it is done)
belongs to that tool alone:

``tracekit``  ``tracekit.parsers.kineto.read_kineto(path)``: the parse into canonical tables.
``bare``      gzip decompress + ``msgspec.json.decode`` into Structs holding only the fields
              tracekit keeps: the practical floor for decoding this JSON in Python.
``hta``       Holistic Trace Analysis: ``TraceAnalysis(trace_dir=...)`` on a temporary folder
              holding a symlink to the file (the load only, no analysis).
``cache``     ``tracekit.read_trace(path)`` answered from the cache (Arrow IPC files), after an untimed
              warm-up process filled a fresh temporary cache folder.

Runs are interleaved (run 1 of every tool, then run 2, ...) so background load is spread
over the tools; the median of the runs is reported.  MB/s is uncompressed JSON bytes per
second.  The tables go to stdout, as Markdown under the machine line (progress goes to
stderr).

    .bench-venv/bin/python scripts/bench_parse.py              # the four large shared traces
    .bench-venv/bin/python scripts/bench_parse.py extra.json.gz
    .bench-venv/bin/python scripts/bench_parse.py --scale      # 256 MB and 1 GB scaled traces

Create the venv with scripts/bench_env.sh (tracekit + HTA).  Without HTA installed the
``hta`` rows say so and the other tools still run.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import msgspec
from benchmachine import compile_tracekit, load_average, machine_line, speed

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"
DEFAULT_TRACES = (
    "hta/tests/data/df_index_resolver/df_index_resolver.json.gz",
    "hta/tests/data/mtia_trace_single_rank/mtia_rank_0.json.gz",
    "hta/tests/data/trace_diff/control/control.json.gz",
    "hta/tests/data/negative_queue_length_values_check/rank0.json.gz",
)
TOOLS = ("tracekit", "bare", "hta", "cache")
#: the distributions whose versions the machine line names
PACKAGES = ("polars", "msgspec", "pandas", "HolisticTraceAnalysis")
SCALE_TOOLS = ("tracekit", "bare", "hta")
RESULT_TAG = "BENCH_RESULT "
MB = 1_000_000

# the parsing targets, checked per trace
TARGET_VS_HTA = 15.0  # tracekit at least this many times faster than HTA's load
TARGET_VS_BARE = 1.0  # tracekit at most as slow as the bare typed decode (the Python floor)
TARGET_RSS_VS_HTA = 1 / 3  # tracekit peak RSS at most this share of HTA's
TARGET_CACHE = 20.0  # second open through the cache at least this many times faster
TARGET_NSIGHT_MBS = 100.0  # Nsight export read, MB of SQLite per second


# --------------------------------------------------------------------------- child side


def _peak_rss_mb() -> float:
    # Linux reports ru_maxrss in KiB (macOS in bytes)
    value = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return value / (1024 * 1024) if sys.platform == "darwin" else value / 1024


Num = Union[int, float, str, None]  # noqa: UP007 - msgspec needs a runtime union


class BareArgs(msgspec.Struct, gc=False):
    """The args tracekit reads from GPU rows and launches."""

    external_id: Num = msgspec.field(default=None, name="External id")
    correlation: Num = None
    stream: Num = None
    device: Num = None
    bytes: Num = None


class BareEvent(msgspec.Struct, gc=False):
    """The event fields tracekit keeps."""

    ph: Num = None
    cat: Num = None
    name: Num = None
    pid: Num = None
    tid: Num = None
    ts: Num = None
    dur: Num = None
    id: Num = None
    args: BareArgs = msgspec.field(default_factory=BareArgs)


class BareDocument(msgspec.Struct):
    traceEvents: list[BareEvent] = msgspec.field(default_factory=list)


def _bare_decode(path: Path) -> int:
    """The floor: read, decompress everything, decode into typed structs, nothing more."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    if data.lstrip()[:1] == b"[":
        events = msgspec.json.decode(data, type=list[BareEvent])
    else:
        events = msgspec.json.decode(data, type=BareDocument).traceEvents
    return len(events)


def _hta_load(path: Path) -> None:
    import logging

    from hta.trace_analysis import TraceAnalysis

    logging.disable(logging.WARNING)  # HTA logs every step; keep the child's stderr for errors
    folder = Path(tempfile.mkdtemp(prefix="bench-hta-"))
    try:
        # HTA reads a folder of per-rank files; it takes the rank from distributedInfo.
        name = "rank-0.json.gz" if path.name.endswith(".gz") else "rank-0.json"
        (folder / name).symlink_to(path.resolve())
        _mark_base()
        start = time.perf_counter()
        analysis = TraceAnalysis(trace_dir=str(folder))
        elapsed = time.perf_counter() - start
        rows = sum(len(df) for df in analysis.t.traces.values())
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    _report(elapsed, rows)


_BASE_RSS: list[float] = []
_BASE_CPU: list[float] = []


def _mark_base() -> None:
    """Remember the peak RSS before the timed work (the interpreter and the tool's imports),
    and the process' CPU time so far (every thread's)."""
    _BASE_RSS.append(_peak_rss_mb())
    _BASE_CPU.append(time.process_time())


def _file_rss_mb() -> float | None:
    """Resident pages of mapped files now (Linux ``RssFile``): mostly the code of the
    interpreter and the libraries the tool ran.  They only grow during a run, so at the end
    this is the share of the peak that is code, not data."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("RssFile:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _report(seconds: float, rows: int) -> None:
    result = {
        "seconds": seconds,
        "cpu_seconds": time.process_time() - _BASE_CPU[-1] if _BASE_CPU else None,
        "rows": rows,
        "rss_mb": _peak_rss_mb(),
        "base_rss_mb": _BASE_RSS[-1] if _BASE_RSS else None,
        "file_rss_mb": _file_rss_mb(),
    }
    print(RESULT_TAG + json.dumps(result), flush=True)


def child_main(tool: str, path: Path) -> None:
    """Run one measurement in this (fresh) process and print its result line."""
    if tool == "hta":
        _hta_load(path)
        return
    if tool == "bare":
        _mark_base()
        start = time.perf_counter()
        rows = _bare_decode(path)
        _report(time.perf_counter() - start, rows)
        return
    if tool == "tracekit":
        from tracekit.parsers.kineto import read_kineto

        _mark_base()
        start = time.perf_counter()
        tables = read_kineto(path)
        _report(time.perf_counter() - start, tables.events.height)
        return
    if tool in ("cache", "cache-warm"):
        from tracekit import read_trace
        from tracekit.reading import cache as tk_cache

        if not os.environ.get("TRACEKIT_CACHE_DIR"):
            raise SystemExit("cache runs need TRACEKIT_CACHE_DIR (a fresh folder)")
        if tool == "cache":
            entry = tk_cache.entry_dir(tk_cache.content_key(path))
            if not (entry / "complete").exists():
                raise SystemExit(f"the cache has no entry for {path}: the warm-up run did not store it")
        _mark_base()
        start = time.perf_counter()
        tables = read_trace(path)
        _report(time.perf_counter() - start, tables.events.height)
        return
    raise SystemExit(f"unknown tool {tool!r}")


# --------------------------------------------------------------------------- parent side


@dataclass
class Run:
    seconds: float | None = None
    cpu_seconds: float | None = None
    rss_mb: float | None = None
    base_rss_mb: float | None = None
    file_rss_mb: float | None = None
    rows: int | None = None
    error: str | None = None


@dataclass
class Measure:
    tool: str
    runs: list[Run] = field(default_factory=list)

    @property
    def ok(self) -> list[Run]:
        return [r for r in self.runs if r.error is None and r.seconds is not None]

    @property
    def error(self) -> str | None:
        bad = [r.error for r in self.runs if r.error]
        return bad[0] if bad and not self.ok else None

    @property
    def seconds(self) -> float | None:
        ok = self.ok
        return statistics.median(r.seconds for r in ok if r.seconds is not None) if ok else None

    @property
    def cpu_seconds(self) -> float | None:
        values = [r.cpu_seconds for r in self.ok if r.cpu_seconds is not None]
        return statistics.median(values) if values else None

    @property
    def rss_mb(self) -> float | None:
        ok = self.ok
        return statistics.median(r.rss_mb for r in ok if r.rss_mb is not None) if ok else None

    @property
    def base_rss_mb(self) -> float | None:
        values = [r.base_rss_mb for r in self.ok if r.base_rss_mb is not None]
        return statistics.median(values) if values else None

    @property
    def file_rss_mb(self) -> float | None:
        values = [r.file_rss_mb for r in self.ok if r.file_rss_mb is not None]
        return statistics.median(values) if values else None

    @property
    def rows(self) -> int | None:
        ok = self.ok
        return ok[0].rows if ok else None


def _proc_rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


def run_child(
    tool: str, path: Path, *, python: str, timeout_s: float, mem_limit_mb: float, env: dict[str, str] | None = None
) -> Run:
    """One measurement in a fresh interpreter, watched for time and memory limits."""
    cmd = [python, str(Path(__file__).resolve()), "--child", tool, str(path)]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=ROOT)
        start = time.monotonic()
        verdict: str | None = None
        while proc.poll() is None:
            if time.monotonic() - start > timeout_s:
                verdict = f"did not finish in {timeout_s:.0f} s"
            elif mem_limit_mb and _proc_rss_mb(proc.pid) > mem_limit_mb:
                verdict = f"out of memory (RSS above the {mem_limit_mb / 1024:.0f} GB limit)"
            if verdict:
                proc.kill()
                proc.wait()
                return Run(error=verdict)
            time.sleep(0.05)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            data = json.loads(line[len(RESULT_TAG) :])
            return Run(
                seconds=data["seconds"],
                cpu_seconds=data.get("cpu_seconds"),
                rss_mb=data["rss_mb"],
                rows=data["rows"],
                base_rss_mb=data["base_rss_mb"],
                file_rss_mb=data.get("file_rss_mb"),
            )
    if proc.returncode in (-9, 137) or "MemoryError" in stderr:
        return Run(error="out of memory")
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    tail = lines[-1] if lines else f"exit status {proc.returncode}"
    return Run(error=f"failed: {tail[:200]}")


def json_bytes(path: Path) -> int:
    """Uncompressed size of the JSON (streamed, never held whole)."""
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    if not gz:
        return path.stat().st_size
    # small blocks: a child's ru_maxrss starts at this (parent) process's peak RSS on Linux
    # (exec keeps the old address space's high-water mark), so the parent must stay small
    total = 0
    with gzip.open(path, "rb") as fh:
        while block := fh.read(1024 * 1024):
            total += len(block)
    return total


def have_hta(python: str) -> str | None:
    """HTA's version in the benchmark interpreter, or None."""
    code = "import importlib.metadata as m, hta.trace_analysis; print(m.version('HolisticTraceAnalysis'))"
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def bench_file(
    path: Path,
    tools: tuple[str, ...],
    *,
    repeat: int,
    python: str,
    timeout_s: float,
    mem_limit_mb: float,
    hta_ok: bool,
    log: Any,
) -> dict[str, Measure]:
    results = {tool: Measure(tool) for tool in tools}
    cache_env: dict[str, str] | None = None
    cache_root: str | None = None
    if "cache" in tools:
        cache_root = tempfile.mkdtemp(prefix="bench-cache-")
        cache_env = {**os.environ, "TRACEKIT_CACHE_DIR": cache_root}
        warm = run_child(
            "cache-warm", path, python=python, timeout_s=timeout_s, mem_limit_mb=mem_limit_mb, env=cache_env
        )
        if warm.error:
            results["cache"].runs.append(Run(error="warm-up " + warm.error))
    try:
        for i in range(repeat):
            for tool in tools:
                m = results[tool]
                if m.runs and all(r.error for r in m.runs):
                    continue  # failed once (timeout, out of memory): do not burn the time again
                if tool == "hta" and not hta_ok:
                    m.runs.append(Run(error="HTA not installed in this interpreter (run scripts/bench_env.sh)"))
                    continue
                env = cache_env if tool == "cache" else None
                run = run_child(tool, path, python=python, timeout_s=timeout_s, mem_limit_mb=mem_limit_mb, env=env)
                m.runs.append(run)
                shown = run.error or f"{run.seconds:.3f} s, {run.rss_mb:.0f} MB"
                log(f"  run {i + 1}/{repeat} {tool:9} {shown}")
    finally:
        if cache_root:
            shutil.rmtree(cache_root, ignore_errors=True)
    return results


# --------------------------------------------------------------------------- reporting


def _label(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(SHARED.resolve()))
    except ValueError:
        return path.name


def _fmt(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**met**" if ok else "**NOT met**")


def results_table(rows: list[tuple[Path, int, dict[str, Measure]]], tools: tuple[str, ...]) -> str:
    head = (
        "| trace | JSON MB | tool | median s | median CPU s | MB/s | peak RSS MB | RSS after imports MB "
        "| code and mapped files at the end MB | runs (s) |\n"
        "|---|--:|---|--:|--:|--:|--:|--:|--:|---|\n"
    )
    lines = []
    for path, size, res in rows:
        for tool in tools:
            m = res.get(tool)
            if m is None:
                continue
            if m.error:
                lines.append(f"| {_label(path)} | {size / MB:.1f} | {tool} | {m.error} | | | | | | |")
                continue
            s = m.seconds
            rate = size / MB / s if s else None
            runs = ", ".join(f"{r.seconds:.2f}" for r in m.ok if r.seconds is not None)
            lines.append(
                f"| {_label(path)} | {size / MB:.1f} | {tool} | {_fmt(s, '.3f')} | {_fmt(m.cpu_seconds, '.3f')} | {_fmt(rate, '.1f')} | "
                f"{_fmt(m.rss_mb, '.0f')} | {_fmt(m.base_rss_mb, '.0f')} | {_fmt(m.file_rss_mb, '.0f')} | {runs} |"
            )
    return head + "\n".join(lines) + "\n"


def _ratio_cell(key: str, tk: Measure | None, other: Measure | None) -> tuple[str, bool | None]:
    """One target cell: the ratio, and whether the target is met (None: not measurable)."""
    if other is None:
        return "n/a", None
    if tk is None or tk.seconds is None or other.seconds is None:
        why = (tk.error if tk is not None and tk.error else None) or other.error
        return "n/a" + (f" ({why})" if why else ""), None
    if key == "hta":
        ratio = other.seconds / tk.seconds
        return f"{ratio:.1f}× {_verdict(ratio >= TARGET_VS_HTA)}", ratio >= TARGET_VS_HTA
    if key == "bare":
        ratio = tk.seconds / other.seconds
        return f"{ratio:.2f}× {_verdict(ratio <= TARGET_VS_BARE)}", ratio <= TARGET_VS_BARE
    if key == "cache":
        ratio = tk.seconds / other.seconds
        return f"{ratio:.1f}× {_verdict(ratio >= TARGET_CACHE)}", ratio >= TARGET_CACHE
    if tk.rss_mb is None or not other.rss_mb:
        return "n/a", None
    ratio = tk.rss_mb / other.rss_mb
    return f"{ratio:.2f} {_verdict(ratio <= TARGET_RSS_VS_HTA)}", ratio <= TARGET_RSS_VS_HTA


def targets_table(rows: list[tuple[Path, int, dict[str, Measure]]]) -> tuple[str, dict[str, list[bool]]]:
    head = (
        "| trace | HTA load ÷ tracekit (target ≥ 15×) | tracekit ÷ bare decode (target ≤ 1×) | "
        "tracekit RSS ÷ HTA RSS (target ≤ 0.33) | cache second open speed-up (target ≥ 20×) |\n"
        "|---|---|---|---|---|\n"
    )
    verdicts: dict[str, list[bool]] = {"hta": [], "bare": [], "rss": [], "cache": []}
    lines = []
    for path, _size, res in rows:
        cells = []
        for key, other in (("hta", "hta"), ("bare", "bare"), ("rss", "hta"), ("cache", "cache")):
            text, ok = _ratio_cell(key, res.get("tracekit"), res.get(other))
            if ok is not None:
                verdicts[key].append(ok)
            cells.append(text)
        lines.append(f"| {_label(path)} | " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n", verdicts


def _summary(verdicts: dict[str, list[bool]]) -> str:
    names = {
        "hta": "≥ 15× faster than HTA's load",
        "bare": "at most as slow as the bare typed decode",
        "rss": "peak RSS at most a third of HTA's",
        "cache": "cache second open ≥ 20× faster than a parse",
    }
    out = []
    for key, label in names.items():
        v = verdicts.get(key, [])
        if not v:
            out.append(f"- {label}: not measured")
        elif all(v):
            out.append(f"- {label}: **met** on all {len(v)} traces")
        elif not any(v):
            out.append(f"- {label}: **NOT met** on any of the {len(v)} traces")
        else:
            out.append(f"- {label}: met on {sum(v)} of {len(v)} traces, **NOT met** on the others")
    return "\n".join(out) + "\n"


def _ratios(rows: list[tuple[Path, int, dict[str, Measure]]], key: str) -> list[float]:
    """Per-trace ratio for one target (only traces where both sides were measured)."""
    out = []
    for _path, _size, res in rows:
        tk, hta, bare, cache = (res.get(t) for t in ("tracekit", "hta", "bare", "cache"))
        if tk is None or tk.seconds is None:
            continue
        if key == "hta" and hta is not None and hta.seconds is not None:
            out.append(hta.seconds / tk.seconds)
        elif key == "bare" and bare is not None and bare.seconds is not None:
            out.append(tk.seconds / bare.seconds)
        elif key == "rss" and hta is not None and hta.rss_mb and tk.rss_mb is not None:
            out.append(tk.rss_mb / hta.rss_mb)
        elif key == "cache" and cache is not None and cache.seconds:
            out.append(tk.seconds / cache.seconds)
    return out


def _span(values: list[float], spec: str, unit: str) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:{spec}}{unit}" if f"{lo:{spec}}" == f"{hi:{spec}}" else f"{lo:{spec}}–{hi:{spec}}{unit}"


def issue_targets(rows: list[tuple[Path, int, dict[str, Measure]]], nsight: list[tuple[Path, float, float]]) -> str:
    """The parsing rows of the targets table: measured range, target, verdict."""
    lines = ["| what | measured (this run) | target | verdict |", "|---|---|---|---|"]
    for r in target_rows(rows, nsight):
        verdict = "n/a" if r["met"] is None else _verdict(bool(r["met"]))
        lines.append(f"| {r['what']} | {r['measured']} | {r['target']} | {verdict} |")
    return "\n".join(lines) + "\n"


def target_rows(rows: list[tuple[Path, int, dict[str, Measure]]], nsight: list[tuple[Path, float, float]]) -> list[dict[str, Any]]:
    """The parsing targets as data: what, measured (text), target (text), met (None: not measured)."""
    out: list[dict[str, Any]] = []

    def row(what: str, values: list[float], shown: str, target: str, ok: bool) -> None:
        out.append({"what": what, "measured": shown if values else "not measured", "target": target, "met": ok if values else None})

    v = _ratios(rows, "hta")
    row("Kineto parse vs HTA `TraceAnalysis` load, same file", v, _span(v, ".1f", "× faster") if v else "",
        f"≥ {TARGET_VS_HTA:.0f}× faster", bool(v) and min(v) >= TARGET_VS_HTA)
    v = _ratios(rows, "bare")
    row("Kineto parse vs bare msgspec typed decode", v, _span(v, ".2f", "× as long") if v else "",
        "at most as slow (≤ 1×)", bool(v) and max(v) <= TARGET_VS_BARE)
    v = _ratios(rows, "rss")
    row("Kineto parse peak RSS vs HTA", v, _span(v, ".2f", "×") if v else "", "≤ 0.33×",
        bool(v) and max(v) <= TARGET_RSS_VS_HTA)
    v = _ratios(rows, "cache")
    row("cached second open vs parse", v, _span(v, ".0f", "× faster") if v else "", "≥ 20× on every trace",
        bool(v) and min(v) >= TARGET_CACHE)
    rates = [size / seconds for _p, size, seconds in nsight if seconds > 0]
    largest = max(nsight, key=lambda r: r[1]) if nsight else None
    shown = ", ".join(f"{p.name} {size:.0f} MB: {size / sec:.0f} MB/s" for p, size, sec in nsight)
    ok = largest is not None and largest[1] / largest[2] >= TARGET_NSIGHT_MBS
    row("Nsight export read (largest export decides)", rates, shown, f"≥ {TARGET_NSIGHT_MBS:.0f} MB/s", ok)
    return out


def bench_nsight_exports(paths: list[Path], repeat: int, log: Any) -> list[tuple[Path, float, float]]:
    """(export, MB, fastest read s) for each export, each in a fresh process (scripts/bench_nsight.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_nsight

    out = []
    for path in paths:
        r = bench_nsight.run_child(path, repeat)
        size = path.stat().st_size / MB
        log(f"{path.name}: {size:.1f} MB in {r['seconds']:.3f} s ({size / r['seconds']:.0f} MB/s)")
        out.append((path, size, r["seconds"]))
    return out


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*", type=Path, help="extra trace files (the four large shared traces always run)")
    ap.add_argument("--only", action="store_true", help="run only the traces given, not the default four")
    ap.add_argument("--repeat", type=int, default=3, help="runs per tool and trace (median reported; default 3)")
    ap.add_argument("--tools", default=None, help=f"comma-separated subset of {','.join(TOOLS)}")
    ap.add_argument("--timeout", type=float, default=600, help="seconds one run may take (default 600)")
    ap.add_argument("--mem-limit-gb", type=float, default=12, help="kill a run above this RSS (default 12)")
    ap.add_argument("--scale", action="store_true", help="benchmark scaled traces built by scripts/scale_kineto.py")
    ap.add_argument("--scale-sizes", default="256,1024", help="sizes in MB for --scale (default 256,1024)")
    ap.add_argument("--scale-dir", type=Path, default=Path("/tmp/tracekit-bench"), help="where scaled traces go")
    ap.add_argument("--hta-timeout", type=float, default=600, help="seconds HTA may take on a scaled trace")
    ap.add_argument("--json", type=Path, help="also write the raw results here")
    ap.add_argument("--targets-json", type=Path, help="also write the target rows here (scripts/bench_targets.py)")
    ap.add_argument(
        "--nsight", type=Path, nargs="*", default=None,
        help="Nsight exports for the MB/s target (default: the real exports and the scaled one of scripts/bench_nsight.py)",
    )
    ap.add_argument("--no-nsight", action="store_true", help="skip the Nsight export rows")
    ap.add_argument("--child", nargs=2, metavar=("TOOL", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child:
        child_main(args.child[0], Path(args.child[1]))
        return 0

    python = sys.executable
    tools = tuple(args.tools.split(",")) if args.tools else (SCALE_TOOLS if args.scale else TOOLS)
    unknown = set(tools) - set(TOOLS)
    if unknown:
        ap.error(f"unknown tools: {', '.join(sorted(unknown))}")
    hta_version = have_hta(python) if "hta" in tools else None
    compile_tracekit(python)  # (as a pip install leaves it: see scripts/benchmachine.py)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    if args.scale:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from scale_kineto import DEFAULT_SOURCE, build, scaled_path

        paths = []
        for size in (int(s) for s in args.scale_sizes.split(",") if s.strip()):
            out = scaled_path(DEFAULT_SOURCE, size, args.scale_dir)
            if not out.exists():
                log(f"building {out} ...")
                build(DEFAULT_SOURCE, size * 1024 * 1024, out)
            paths.append(out)
    else:
        paths = [] if args.only else [SHARED / p for p in DEFAULT_TRACES]
        paths += list(args.traces)
    missing = [p for p in paths if not p.exists()]
    if missing:
        log("missing trace files: " + ", ".join(map(str, missing)))
        paths = [p for p in paths if p.exists()]
    if not paths:
        log("nothing to benchmark")
        return 1

    load_before = load_average()
    speeds = [("before", speed(python))]
    rows = []
    for path in paths:
        size = json_bytes(path)
        log(f"{_label(path)}: {size / MB:.1f} MB of JSON")
        common = {
            "python": python,
            "mem_limit_mb": args.mem_limit_gb * 1024,
            "hta_ok": hta_version is not None,
            "log": log,
        }
        if args.scale:
            # one tool after the other (HTA once, under its own time limit): big runs, few of them
            res: dict[str, Measure] = {}
            for tool in tools:
                is_hta = tool == "hta"
                res.update(
                    bench_file(
                        path,
                        (tool,),
                        repeat=1 if is_hta else args.repeat,
                        timeout_s=min(args.hta_timeout, args.timeout) if is_hta else args.timeout,
                        **common,
                    )
                )
        else:
            res = bench_file(path, tools, repeat=args.repeat, timeout_s=args.timeout, **common)
        rows.append((path, size, res))
    table = results_table(rows, tools)

    def machine() -> str:
        loads = [("before", load_before), ("after", load_average())]
        return machine_line(python, PACKAGES, loads, [*speeds, ("after", speed(python))])

    if args.scale:
        print(
            machine() + "\n\n" + table + "\nHTA ran once per scaled trace (limit "
            f"{args.hta_timeout:.0f} s, {args.mem_limit_gb:.0f} GB RSS); tracekit and the bare decode "
            f"ran {args.repeat} times each.\n"
        )
    else:
        targets, verdicts = targets_table(rows)
        nsight: list[tuple[Path, float, float]] = []
        if not args.no_nsight:
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            import bench_nsight

            exports = args.nsight if args.nsight else [p for p in bench_nsight.REAL if p.exists()] + [bench_nsight.SCALED]
            missing_exports = [p for p in exports if not p.exists()]
            if missing_exports:
                log("missing Nsight exports (build the scaled one with scripts/scale_nsight.py): "
                    + ", ".join(map(str, missing_exports)))
            nsight = bench_nsight_exports([p for p in exports if p.exists()], args.repeat, log)
        print(
            machine()
            + "\n\nTargets, parsing rows (this run):\n\n"
            + issue_targets(rows, nsight)
            + f"\nMedian of {args.repeat} runs, each in a fresh process.\n\n"
            + table
            + "\nTargets, per trace (ratios of the medians above):\n\n"
            + targets
            + "\n"
            + _summary(verdicts)
        )
        if args.targets_json:
            args.targets_json.write_text(json.dumps(target_rows(rows, nsight), indent=1), encoding="utf-8")
    if args.json:
        payload = [
            {
                "trace": _label(p),
                "json_bytes": s,
                "tools": {
                    t: {"runs": [r.__dict__ for r in m.runs], "median_s": m.seconds, "rss_mb": m.rss_mb}
                    for t, m in res.items()
                },
            }
            for p, s, res in rows
        ]
        args.json.write_text(json.dumps(payload, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
