"""The fuzzing campaign's command line (``python scripts/fuzz COMMAND``).

``build [asan|coverage]``   build the extensions for the fuzzer (build/fuzz/KIND)
``run``                     every harness under atheris with the sanitizer build, one after
                            the other; ``--minutes``/``--seconds`` per harness, ``--runs`` for
                            a number of executions (both: until both are reached), ``--harness
                            a,b`` for some; exit 1 on any finding (crash, sanitizer report,
                            leak, hang, differential mismatch)
``coverage``                the corpora replayed through the gcov build: lines run per C file
``replay NAME PATH...``     inputs (files or folders) through one harness, e.g. a crash file
``worker NAME ARGS...``     one harness under atheris (what ``run`` starts, in its own process)

Corpora grow in build/fuzz/corpus/NAME (seeded from seeds.py at every run); findings are
written to build/fuzz/findings/NAME-*; the last run's figures to build/fuzz/last-run.json.
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

from . import build, seeds
from .harnesses import HARNESSES

HERE = Path(__file__).resolve().parent
CORPUS = build.BUILD_ROOT / "corpus"
FINDINGS = build.BUILD_ROOT / "findings"
LAST_RUN = build.BUILD_ROOT / "last-run.json"
#: libFuzzer's dictionary of JSON and Kineto tokens (the scanner's and the readers' harnesses)
DICT = HERE / "json.dict"
_DICT_USERS = ("kineto_scan", "kineto_diff", "gzip")
#: a case over this many seconds is a hang
CASE_SECONDS = 20
#: one report of AddressSanitizer or UndefinedBehaviorSanitizer (leaks are counted apart)
_SANITIZER = re.compile(r"==ERROR: AddressSanitizer|runtime error:|AddressSanitizer: CHECK failed")
#: a sanitizer that could not do its work (LeakSanitizer failing to stop the threads at exit,
#: for one): the campaign ran, but its check at exit did not; the harness is run again once
_TOOL_FAILURE = re.compile(r"Sanitizer has encountered a fatal error")
#: lines of a harness's log shown when it fails, so that a CI log says why
LOG_TAIL = 40


def sanitizer_env() -> dict[str, str]:
    """The environment a sanitizer build runs in: ASan's runtime first, leaks detected (with
    the interpreter's own suppressed), Python's allocator off so that LeakSanitizer sees
    every object's memory, and every report fatal."""
    def lib(name: str) -> str:
        return subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True, text=True, check=True).stdout.strip()

    # libstdc++ loaded with ASan's runtime, so that ASan finds the C++ throw that atheris's
    # bindings use when a harness raises (the interpreter itself has no libstdc++)
    return {
        **os.environ,
        "LD_PRELOAD": f"{lib('libasan.so')} {lib('libstdc++.so')}",
        "PYTHONMALLOC": "malloc",
        # polars' pool of threads, one: fewer threads for LeakSanitizer to stop at exit
        "POLARS_MAX_THREADS": "1",
        "ASAN_OPTIONS": "detect_leaks=1:allocator_may_return_null=1:detect_stack_use_after_return=0:handle_segv=1",
        "LSAN_OPTIONS": f"suppressions={HERE / 'lsan.supp'}:print_suppressions=0",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
    }


def _seed(name: str) -> Path:
    folder = CORPUS / name
    folder.mkdir(parents=True, exist_ok=True)
    for i, data in enumerate(seeds.corpus(name)):
        path = folder / f"seed-{i:04d}"
        if not path.exists():
            path.write_bytes(data)
    return folder


def _stat(text: str, key: str) -> int | None:
    found = re.findall(rf"stat::{key}:\s*(\d+)", text)
    return int(found[-1]) if found else None


def run_one(name: str, seconds: int | None, runs: int | None) -> dict[str, object]:
    """One harness's campaign; its figures.  With both ``seconds`` and ``runs`` it lasts
    until both are reached (at least that long, at least that many executions): a first
    process for the time, then one for the executions still missing, on the same corpus,
    their figures added up."""
    if seconds is None or runs is None:
        return _run_process(name, seconds, runs)
    first = _run_process(name, seconds, None)
    missing = runs - int(first["executions"])  # type: ignore[call-overload]
    if missing <= 0 or _failed(first):
        return first
    return _added(first, _run_process(name, None, missing))


def _added(a: dict[str, object], b: dict[str, object]) -> dict[str, object]:
    """The figures of two processes of one harness's campaign, one after the other."""
    out = dict(b)
    for key in ("executions", "seconds", "sanitizer_reports", "leaks", "hangs", "crashes", "tool_failures"):
        out[key] = a[key] + b[key]  # type: ignore[operator]
    out["seconds"] = round(float(out["seconds"]), 1)  # type: ignore[arg-type]
    out["peak_rss_mb"] = max(int(a["peak_rss_mb"] or 0), int(b["peak_rss_mb"] or 0))  # type: ignore[call-overload]
    out["exit"] = a["exit"] or b["exit"]
    return out


def _run_process(name: str, seconds: int | None, runs: int | None) -> dict[str, object]:
    """One harness under atheris in its own process, for ``seconds`` or ``runs`` (the first
    reached); its figures."""
    h = HARNESSES[name]
    corpus = _seed(name)
    FINDINGS.mkdir(parents=True, exist_ok=True)
    args = [
        str(corpus), f"-max_len={h.max_len}", f"-timeout={CASE_SECONDS}", "-rss_limit_mb=4096", "-malloc_limit_mb=4096",
        "-print_final_stats=1", f"-artifact_prefix={FINDINGS}/{name}-", "-use_value_profile=1",
        # leaks are found once, at exit, by LeakSanitizer over the whole campaign (a leak per
        # input adds up): libFuzzer's check after each input stops the world from inside the
        # interpreter's callback, which LeakSanitizer cannot do there
        "-detect_leaks=0",
    ]
    if seconds is not None:
        args.append(f"-max_total_time={seconds}")
    if runs is not None:
        args.append(f"-runs={runs}")
    if name in _DICT_USERS:
        args.append(f"-dict={DICT}")
    cmd = [sys.executable, str(HERE), "worker", name, *args]
    started = time.monotonic()
    log = build.BUILD_ROOT / f"{name}.log"
    # a Python-level harness runs without the sanitizer: ASan's runtime, loaded first, would
    # answer the coverage hooks atheris calls for Python's edges with its no-op defaults
    env = sanitizer_env() if h.module is not None else dict(os.environ)
    with open(log, "w") as out:
        done = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    text = log.read_text(errors="replace")
    cov = re.findall(r"cov: (\d+) ft: (\d+)", text)
    result = {
        "harness": name,
        "executions": _stat(text, "number_of_executed_units") or 0,
        "seconds": round(time.monotonic() - started, 1),
        "edges": int(cov[-1][0]) if cov else None,
        "features": int(cov[-1][1]) if cov else None,
        "corpus": sum(1 for _ in corpus.iterdir()),
        "peak_rss_mb": _stat(text, "peak_rss_mb"),
        "sanitizer_reports": len(_SANITIZER.findall(text)),
        "leaks": text.count("ERROR: LeakSanitizer"),
        "hangs": text.count("ALARM: working on the last Unit") + text.count("libFuzzer: timeout"),
        "crashes": text.count("==ERROR: libFuzzer") + text.count("Uncaught Python exception"),
        "tool_failures": len(_TOOL_FAILURE.findall(text)),
        "exit": done.returncode,
        "log": str(log),
    }
    return result


def _found(r: dict[str, object]) -> bool:
    """Whether a harness's campaign found something in the code under test."""
    return bool(r["sanitizer_reports"] or r["leaks"] or r["hangs"] or r["crashes"])


def _failed(r: dict[str, object]) -> bool:
    return r["exit"] != 0 or _found(r) or bool(r["tool_failures"])


def _tail(log: str) -> str:
    lines = Path(log).read_text(errors="replace").splitlines()
    return "\n".join("    " + line for line in lines[-LOG_TAIL:])


def _table(results: list[dict[str, object]]) -> str:
    lines = [
        "| harness | executions | seconds | edges (cov) | corpus | crashes | sanitizer reports | leaks | hangs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['harness']} | {r['executions']:,} | {r['seconds']:,} | {r['edges']} | {r['corpus']:,} | "
            f"{r['crashes']} | {r['sanitizer_reports']} | {r['leaks']} | {r['hangs']} |"
        )
    return "\n".join(lines)


def cmd_run(ns: argparse.Namespace) -> int:
    names = ns.harness.split(",") if ns.harness else list(HARNESSES)
    unknown = [n for n in names if n not in HARNESSES]
    if unknown:
        print(f"no harness {', '.join(unknown)} (there are: {', '.join(HARNESSES)})", file=sys.stderr)
        return 2
    build.build("asan")
    seconds = ns.seconds if ns.seconds is not None else (int(ns.minutes * 60) if ns.minutes is not None else None)
    if seconds is None and ns.runs is None:
        seconds = 60
    results = []
    for name in names:
        result = run_one(name, seconds, ns.runs)
        print(f"{name}: {result['executions']:,} executions in {result['seconds']} s, exit {result['exit']}", flush=True)
        if result["tool_failures"] and not _found(result):
            # the sanitizer failed, not the code: say so, keep its log, and run the harness again
            kept = Path(str(result["log"])).with_suffix(".tool-failure.log")
            Path(str(result["log"])).replace(kept)
            print(f"{name}: the sanitizer failed at exit (not a finding; log kept in {kept}): run again", flush=True)
            result = run_one(name, seconds, ns.runs)
            print(f"{name}: {result['executions']:,} executions in {result['seconds']} s, exit {result['exit']}", flush=True)
        results.append(result)
    LAST_RUN.write_text(json.dumps(results, indent=2) + "\n")
    print(_table(results))
    bad = [r for r in results if _failed(r)]
    for r in bad:
        what = "finding" if _found(r) else "failure, no finding recognised"
        print(f"{what} in {r['harness']} (exit {r['exit']}): see {r['log']} and {FINDINGS}/{r['harness']}-*; "
              f"the log ends:\n{_tail(str(r['log']))}", file=sys.stderr)
    return 1 if bad else 0


def cmd_coverage(ns: argparse.Namespace) -> int:
    """Replay each harness's corpus through the gcov build; lines run per C file."""
    names = ns.harness.split(",") if ns.harness else list(HARNESSES)
    build.build("coverage")
    objects = build.folder("coverage").with_name("coverage.tmp")
    for gcda in objects.rglob("*.gcda"):
        gcda.unlink()
    for name in names:
        corpus = _seed(name)
        subprocess.run([sys.executable, str(HERE), "replay", "--build", "coverage", name, str(corpus)], check=True)
    report = {}
    for source in sorted(build.NATIVE_DIR.glob("_*.c")):
        gcno = next(objects.rglob(source.stem + ".gcno"), None)
        if gcno is None:
            continue
        done = subprocess.run(["gcov", "-n", "-o", str(gcno.parent), str(source)], capture_output=True, text=True, check=False)
        found = re.search(rf"File '[^']*{source.name}'\s*\nLines executed:([\d.]+)% of (\d+)", done.stdout)
        if found:
            report[source.name] = {"lines": int(found.group(2)), "percent": float(found.group(1))}
    print("| C file | lines | executed |\n|---|---:|---:|")
    for file, figures in report.items():
        print(f"| {file} | {figures['lines']:,} | {figures['percent']:.1f}% |")
    (build.BUILD_ROOT / "coverage.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:  # libFuzzer's own flags follow: no parsing here
        from .worker import fuzz

        fuzz(argv[1], argv[2:])
        return 0
    parser = argparse.ArgumentParser(prog="python scripts/fuzz", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_build = sub.add_parser("build", help="build the extensions for the fuzzer")
    p_build.add_argument("kind", nargs="?", default="asan", choices=build.KINDS)
    p_run = sub.add_parser("run", help="a campaign over the harnesses")
    p_run.add_argument("--minutes", type=float)
    p_run.add_argument("--seconds", type=int)
    p_run.add_argument("--runs", type=int, help="executions per harness (with --minutes: at least this many, and at least that long)")
    p_run.add_argument("--harness", help="comma-separated harness names (default: all)")
    p_cov = sub.add_parser("coverage", help="lines of each C file the corpora run")
    p_cov.add_argument("--harness")
    p_replay = sub.add_parser("replay", help="inputs through one harness")
    p_replay.add_argument("--build", choices=build.KINDS, help="use this build's modules (default: the installed ones)")
    p_replay.add_argument("name", choices=list(HARNESSES))
    p_replay.add_argument("paths", nargs="+", type=Path)
    ns = parser.parse_args(argv)
    if ns.command == "build":
        print("\n".join(str(p) for p in build.build(ns.kind, quiet=False).values()))
        return 0
    if ns.command == "run":
        return cmd_run(ns)
    if ns.command == "coverage":
        return cmd_coverage(ns)
    from .worker import replay

    count = replay(ns.name, ns.paths, ns.build)
    print(f"{ns.name}: {count} inputs, no finding")
    return 0
