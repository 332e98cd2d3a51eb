#!/usr/bin/env python3
"""Mutation fuzzing of the Kineto and Nsight readers and of the analysis, at scale.

Every case is: mutate a valid trace (scripts/fuzzing.py), parse it, validate the tables,
run ``diagnose``.  Expected outcomes: "ok" (tables, possibly partial with warnings) or
"refused" (a TracekitError).  Anything else — another exception or a case over the time
limit — is an unexpected failure, printed with the seed that replays it.

Usage:
    python scripts/fuzz_parsers.py                 # 5,000 cases per parser, writes docs/fuzzing.md
    python scripts/fuzz_parsers.py --cases 200 --no-write
    python scripts/fuzz_parsers.py --cases 20000 --minutes 15   # stops each parser after 7.5 min
    python scripts/fuzz_parsers.py --cases 20000 --jobs 8       # the cases shared by 8 processes
    python scripts/fuzz_parsers.py --cases 20000 --parser nsight   # one parser (docs untouched)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzzing import KINETO_MUTATIONS, SQLITE_MUTATIONS, kineto_mutation, run_case, sqlite_mutation, write_variant

from tracekit.analysis import diagnose
from tracekit.parsers import parse

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "traces"
CASE_SECONDS = 30
PARSERS = ("kineto", "nsight")
MARK_START = "<!-- fuzz:start -->"
MARK_END = "<!-- fuzz:end -->"


class Hang(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise Hang()


def kineto_seeds() -> list[tuple[str, dict[str, object], bytes]]:
    seeds = []
    for name in ("host_sync", "pageable_memcpy"):
        doc = json.loads((REPO / "sample_traces" / "synthetic" / f"{name}.kineto.json").read_text())
        doc["traceEvents"] = doc["traceEvents"][:200]
        seeds.append((f"synthetic/{name}", doc, json.dumps(doc).encode()))
    for rel in ("kineto/gpu_metrics_input.json", "kineto/synthetic_cuda_sync_before_fix.json"):
        path = SHARED / rel
        if path.exists():
            doc = json.loads(path.read_text())
            seeds.append((rel, doc, path.read_bytes()))
    return seeds


def sqlite_seeds() -> list[Path]:
    seeds = [REPO / "sample_traces" / "synthetic" / "host_sync.nsys.sqlite", REPO / "sample_traces" / "synthetic" / "pageable_memcpy.nsys.sqlite"]
    real = SHARED / "nsight" / "pipit" / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
    if real.exists():
        seeds.append(real)
    return seeds


def _cases(parser: str, indices: range, seconds: float | None) -> dict[str, object]:
    """The cases ``indices`` of one parser in this process (stopping once ``seconds`` have
    passed): how many ran, their outcomes in all and by mutation, and the failures."""
    signal.signal(signal.SIGALRM, _alarm)
    kinds = KINETO_MUTATIONS if parser == "kineto" else SQLITE_MUTATIONS
    counts: Counter[str] = Counter()
    by_kind: dict[str, Counter[str]] = {k: Counter() for k in kinds}
    failures: list[str] = []
    started = time.perf_counter()
    kseeds = kineto_seeds() if parser == "kineto" else []
    sseeds = sqlite_seeds() if parser == "nsight" else []
    done = 0
    with tempfile.TemporaryDirectory(prefix="tracekit-fuzz-") as tmp:
        work = Path(tmp)
        for i in indices:
            if seconds is not None and time.perf_counter() - started > seconds:
                break
            done += 1
            kind = kinds[i % len(kinds)]
            rng = random.Random(f"{parser}-{i}")
            if parser == "kineto":
                label, doc, raw = kseeds[i % len(kseeds)]
                path = write_variant(kineto_mutation(doc, raw, rng, kind), work / f"k{i}.json", rng)
            else:
                src = sseeds[i % len(sseeds)]
                label = src.name
                path = sqlite_mutation(src, work / f"s{i}.sqlite", rng, kind)

            def case(path: Path = path) -> None:
                tables = parse(path)
                tables.validate()
                diagnose(tables)

            signal.alarm(CASE_SECONDS)
            try:
                outcome = run_case(case)
            except Hang:
                outcome = "hang"
                failures.append(f"{parser} case {i} ({kind}, seed {parser}-{i}, from {label}): no result in {CASE_SECONDS} s")
            except Exception as exc:
                outcome = "unexpected"
                failures.append(
                    f"{parser} case {i} ({kind}, seed {parser}-{i}, from {label}): {type(exc).__name__}: {exc}\n"
                    + "".join(traceback.format_exception(exc)[-3:])
                )
            finally:
                signal.alarm(0)
            counts[outcome] += 1
            by_kind[kind][outcome] += 1
            path.unlink(missing_ok=True)
    return {"cases": done, "outcomes": dict(counts), "by_mutation": {k: dict(v) for k, v in by_kind.items()}, "failures": failures}


def _share(job: tuple[str, int, int, int, float | None]) -> dict[str, object]:
    parser, cases, jobs, j, seconds = job
    return _cases(parser, range(j, cases, jobs), seconds)


@contextmanager
def _child_env(**defaults: str) -> Iterator[None]:
    """Environment defaults (the caller's own settings win) for the processes started inside
    the block, never left behind in this process: a spawned child copies the environment when
    it starts, and the pool starts its processes as it is made."""
    added = {k: v for k, v in defaults.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


def run(cases: int, seconds_per_parser: float | None = None, jobs: int = 1, parsers: tuple[str, ...] = PARSERS) -> dict[str, object]:
    """Up to ``cases`` cases per parser (of ``parsers``), each parser stopping early once it has run for
    ``seconds_per_parser`` (the counts then say how many ran); ``jobs`` processes share each
    parser's cases (case i in process i mod jobs: every process sees every mutation kind)."""
    results: dict[str, object] = {}
    failures: list[str] = []
    for parser in parsers:
        started = time.perf_counter()
        shares = [(parser, cases, jobs, j, seconds_per_parser) for j in range(jobs)]
        if jobs == 1:
            parts = [_share(shares[0])]
        else:
            # fresh interpreters: a fork of a process whose polars threads hold a lock deadlocks;
            # one polars thread each (unless the caller chose): the cases are tiny frames, where
            # a pool of threads per process costs a third more CPU than it saves
            with _child_env(POLARS_MAX_THREADS="1"), multiprocessing.get_context("spawn").Pool(jobs) as pool:
                parts = pool.map(_share, shares)
        counts: Counter[str] = Counter()
        by_kind: dict[str, Counter[str]] = {}
        for part in parts:
            counts.update(part["outcomes"])  # type: ignore[arg-type]
            for kind, o in part["by_mutation"].items():  # type: ignore[attr-defined]
                by_kind.setdefault(kind, Counter()).update(o)
            failures.extend(part["failures"])  # type: ignore[arg-type]
        results[parser] = {
            "cases": sum(int(part["cases"]) for part in parts),  # type: ignore[call-overload]
            "seconds": round(time.perf_counter() - started, 1),
            "outcomes": dict(counts),
            "by_mutation": {k: dict(v) for k, v in by_kind.items()},
        }
    results["failures"] = failures
    return results


def markdown(results: dict[str, object]) -> str:
    parsers = [p for p in PARSERS if p in results]
    lines = [MARK_START, "", "| parser | cases | ok (tables) | refused (TracekitError) | unexpected | hangs | seconds |", "|---|---:|---:|---:|---:|---:|---:|"]
    for parser in parsers:
        r = results[parser]
        assert isinstance(r, dict)
        o = r["outcomes"]
        lines.append(f"| {parser} | {r['cases']:,} | {o.get('ok', 0):,} | {o.get('refused', 0):,} | {o.get('unexpected', 0)} | {o.get('hang', 0)} | {r['seconds']} |")
    lines += ["", "Outcomes by mutation:", ""]
    for parser in parsers:
        r = results[parser]
        assert isinstance(r, dict)
        for kind, o in r["by_mutation"].items():
            lines.append(f"- {parser} `{kind}`: " + ", ".join(f"{k} {v}" for k, v in sorted(o.items())))
    lines += ["", MARK_END]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=5000, help="cases per parser")
    ap.add_argument("--minutes", type=float, help="stop after this long in all (shared equally by the parsers run)")
    ap.add_argument("--no-write", action="store_true", help="do not update docs/fuzzing.md")
    ap.add_argument("--jobs", type=int, default=1, help="processes sharing each parser's cases (default 1)")
    ap.add_argument("--parser", choices=PARSERS, help="only this parser's cases (docs/fuzzing.md is then left as it is)")
    args = ap.parse_args()
    parsers = (args.parser,) if args.parser else PARSERS
    seconds = None if args.minutes is None else args.minutes * 60 / len(parsers)
    results = run(args.cases, seconds, jobs=max(1, args.jobs), parsers=parsers)
    text = markdown(results)
    print(text)
    failures = results["failures"]
    assert isinstance(failures, list)
    for f in failures:
        print("FAILURE:", f, file=sys.stderr)
    if not args.no_write and not args.parser:
        doc = REPO / "docs" / "fuzzing.md"
        current = doc.read_text(encoding="utf-8")
        head, rest = current.split(MARK_START, 1)
        _, tail = rest.split(MARK_END, 1)
        doc.write_text(head + text + tail, encoding="utf-8")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
