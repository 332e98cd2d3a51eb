"""What the benchmark scripts share about the machine they measure on.

:func:`compile_tracekit`: tracekit's modules byte-compiled before a benchmark runs it, as a
pip install leaves them.  pip writes a ``.pyc`` beside every module it installs, so a user's
tracekit, like the HTA, pandas and polars that the benchmarks compare it with, imports
compiled code.  The benchmark venv installs tracekit editable, from the source tree, where
nothing is compiled until an import writes it, and an environment with
``PYTHONDONTWRITEBYTECODE`` set (this project's CI machines and containers have it) never
writes it: then every fresh benchmark process compiles all of tracekit's modules again. That costs import time, which no row
times, and leaves the compiler's freed memory in the process: 5-7 MB more peak RSS in a
parse, measured (docs/performance.md, round 12).  So the benchmark scripts compile first.

:func:`speed`: how fast the machine is right now, printed beside the load average, so that
runs taken at different times can be compared (a shared machine's speed drifts by a quarter
within an evening, with the load average unchanged).
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


#: run in a fresh child: the best of three runs of a fixed pure-Python loop (ms), and the
#: cost of a first write to a fresh page (µs; page faults are a large share of a parse's
#: time on a VM)
_CALIBRATE = """
import mmap, time
loops = []
for _ in range(3):
    t = time.perf_counter()
    s = 0
    for i in range(5_000_000):
        s += i
    loops.append(time.perf_counter() - t)
n = 64 * 2**20
m = mmap.mmap(-1, n)
t = time.perf_counter()
for i in range(0, n, mmap.PAGESIZE):
    m[i] = 1
fault = (time.perf_counter() - t) / (n // mmap.PAGESIZE)
print(min(loops) * 1e3, fault * 1e6)
"""


def speed(python: str) -> tuple[float, float]:
    """(a fixed pure-Python loop in ms, µs per first write to a fresh page), measured now."""
    out = subprocess.run([python, "-c", _CALIBRATE], capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), float(out[1])


def speed_text(speeds: list[tuple[str, tuple[float, float]]]) -> str:
    """One sentence of :func:`speed`'s readings, each labelled (before, after...)."""
    readings = ", ".join(f"{label} {loop:.0f} ms / {fault:.2f} µs" for label, (loop, fault) in speeds)
    return f"Machine speed (a fixed pure-Python loop, best of 3 / a first write to a fresh page): {readings}."
