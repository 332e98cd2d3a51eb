"""Byte-compile tracekit's modules before a benchmark runs it, as a pip install does.

pip writes a ``.pyc`` beside every module it installs, so a user's tracekit, like the HTA,
pandas and polars that the benchmarks compare it with, imports compiled code.  The
benchmark venv installs tracekit editable, from the source tree, where nothing is compiled
until an import writes it, and an environment with ``PYTHONDONTWRITEBYTECODE`` set (this
project's CI machines and containers have it) never writes it: then every fresh benchmark
process compiles all of tracekit's modules again. That costs import time, which no row
times, and leaves the compiler's freed memory in the process: 5-7 MB more peak RSS in a
parse, measured (docs/performance.md, round 12).  So the benchmark scripts compile first.
"""

from __future__ import annotations

import subprocess

_COMPILE = (
    "import compileall, os, sys\n"
    "import tracekit, tracekit.parsers\n"
    "dirs = sorted({os.path.dirname(m.__file__) for m in (tracekit, tracekit.parsers)})\n"
    "ok = all(compileall.compile_dir(d, quiet=1) for d in dirs)\n"
    "print(' '.join(dirs))\n"
    "sys.exit(0 if ok else 1)\n"
)


def compile_tracekit(python: str) -> str:
    """Write the ``.pyc`` of every module of tracekit that ``python`` imports (its package
    folder and the parsers' one, which an editable install maps elsewhere); the folders."""
    done = subprocess.run([python, "-c", _COMPILE], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"could not byte-compile tracekit with {python}:\n{done.stdout}{done.stderr}")
    return done.stdout.strip()
