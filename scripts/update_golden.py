#!/usr/bin/env python3
"""Regenerate the golden report files in tests/golden/ from the committed synthetic traces.

Usage: python scripts/update_golden.py          # rewrite tests/golden/*
       python scripts/update_golden.py --check  # exit 1 and show a diff when a file is stale

Each file is what ``tracekit analyze`` / ``tracekit diff`` print for a fixed synthetic trace
(run from the repository root, so paths are relative).  The tracekit version is replaced by
``{VERSION}`` so a version bump does not invalidate them; any other change in a report shows
up in the golden files' diff, where it is reviewed.  tests/test_golden.py compares against them.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden"
SYN = "sample_traces/synthetic"
#: one rank's trace of a capture folder: its findings name the code the program's facts point at
CAP = "sample_traces/captures/slow_dataloader/rank0.cycle0.pt.trace.json.gz"

#: golden file name → tracekit command line (paths relative to the repository root)
CASES: dict[str, list[str]] = {
    "analyze_host_sync.txt": ["analyze", f"{SYN}/host_sync.kineto.json", "--format", "text"],
    "analyze_host_sync.json": ["analyze", f"{SYN}/host_sync.kineto.json", "--format", "json"],
    "analyze_host_sync.md": ["analyze", f"{SYN}/host_sync.kineto.json", "--format", "markdown"],
    "analyze_host_sync.html": ["analyze", f"{SYN}/host_sync.kineto.json", "--format", "html"],
    "analyze_capture_dataloader.txt": ["analyze", CAP, "--format", "text"],
    "analyze_capture_dataloader.json": ["analyze", CAP, "--format", "json"],
    "analyze_capture_dataloader.md": ["analyze", CAP, "--format", "markdown"],
    "analyze_capture_dataloader.html": ["analyze", CAP, "--format", "html"],
    "analyze_dataloader_stall_nsys.html": ["analyze", f"{SYN}/dataloader_stall.nsys.sqlite", "--format", "html"],
    "diff_dataloader.txt": ["diff", f"{SYN}/dataloader_stall.kineto.json", f"{SYN}/dataloader_fixed.nsys.sqlite"],
    "diff_dataloader.json": ["diff", f"{SYN}/dataloader_stall.kineto.json", f"{SYN}/dataloader_fixed.nsys.sqlite", "--format", "json"],
    "diff_dataloader.md": ["diff", f"{SYN}/dataloader_stall.kineto.json", f"{SYN}/dataloader_fixed.nsys.sqlite", "--format", "markdown"],
}

VERSION_TOKEN = "{VERSION}"


def normalise(text: str) -> str:
    """Replace the tracekit version where reports print it."""
    from tracekit._version import __version__ as v

    return (
        text.replace(f'"tracekit_version": "{v}"', f'"tracekit_version": "{VERSION_TOKEN}"')
        .replace(f"tracekit {v}", f"tracekit {VERSION_TOKEN}")
    )


def render(name: str) -> str:
    """Run the case's command (as a user would, from the repository root) and return its report."""
    from tracekit.cli import main

    cwd = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="tracekit-golden-") as tmp:
        out = Path(tmp) / name
        try:
            os.chdir(REPO)
            with contextlib.redirect_stderr(io.StringIO()):  # the "wrote FILE" line
                code = main([*CASES[name], "--out", str(out), "--no-cache"])
        finally:
            os.chdir(cwd)
        if code != 0:
            raise RuntimeError(f"tracekit {' '.join(CASES[name])} exited with {code}")
        return normalise(out.read_text(encoding="utf-8"))


def stale_diff(name: str, expected: str, actual: str, context: int = 60) -> str:
    lines = list(difflib.unified_diff(expected.splitlines(), actual.splitlines(), f"golden/{name}", "rendered", lineterm="", n=1))
    shown = lines[:context] + ([f"... {len(lines) - context} more diff lines"] if len(lines) > context else [])
    return "\n".join(shown)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale files")
    args = parser.parse_args()
    GOLDEN.mkdir(parents=True, exist_ok=True)
    stale = 0
    for name in CASES:
        path = GOLDEN / name
        actual = render(name)
        expected = path.read_text(encoding="utf-8") if path.exists() else ""
        if actual == expected:
            print(f"unchanged {path.relative_to(REPO)}")
            continue
        if args.check:
            stale += 1
            print(f"STALE {path.relative_to(REPO)}\n{stale_diff(name, expected, actual)}")
        else:
            path.write_text(actual, encoding="utf-8")
            print(f"wrote {path.relative_to(REPO)}")
    known = set(CASES)
    for extra in sorted(p for p in GOLDEN.iterdir() if p.is_file() and p.name not in known):
        print(f"note: {extra.relative_to(REPO)} is not produced by any case", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
