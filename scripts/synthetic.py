#!/usr/bin/env python3
"""Synthetic PyTorch-profiler traces with exact ground truth: the command line.

The generator is the test-support package ``tests/synth`` (model and builder, scenarios, truth,
Kineto and Nsight writers; see its docstring).  This script writes every scenario's files::

    python scripts/synthetic.py --out sample_traces/synthetic
    python scripts/synthetic.py --check --out sample_traces/synthetic   # exit 1 if stale
"""

from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))

import synth  # noqa: E402


def _default_out() -> Path:
    return REPO / "sample_traces" / "synthetic"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--out", type=Path, default=_default_out(),
                    help="directory the files are written into (default: sample_traces/synthetic)")
    ap.add_argument("--check", action="store_true",
                    help="regenerate into a temporary directory and exit 1 if --out differs")
    ns = ap.parse_args(argv)
    if ns.check:
        with tempfile.TemporaryDirectory() as tmp:
            fresh = synth.write_all(tmp)
            stale = [f.name for f in fresh
                     if not (ns.out / f.name).is_file() or not filecmp.cmp(f, ns.out / f.name, shallow=False)]
        for name in stale:
            print(f"stale: {ns.out / name}", file=sys.stderr)
        return 1 if stale else 0
    for path in synth.write_all(ns.out):
        print(f"{path}  {path.stat().st_size:>9,d} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
