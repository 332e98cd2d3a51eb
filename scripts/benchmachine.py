"""What the benchmark scripts share about the machine they measure on.

:func:`machine_line`: the line every benchmark prints above its table, so that a result
always says where it was taken: the system, CPU model, core count and memory, the Python and
library versions, which of tracekit's native modules were in use, the 1-minute load average
and, where a script asks for it, the machine's speed.

:func:`compile_tracekit`: tracekit's modules byte-compiled before a benchmark runs it, as a
pip install leaves them.  pip writes a ``.pyc`` beside every module it installs, so a user's
tracekit, like the HTA, pandas and polars that the benchmarks compare it with, imports
compiled code.  The benchmark venv installs tracekit editable, from the source tree, where
nothing is compiled until an import writes it, and an environment with
``PYTHONDONTWRITEBYTECODE`` set (this project's CI machines and containers have it) never
writes it: then every fresh benchmark process compiles all of tracekit's modules again.  That
costs import time, which no row times, and leaves the compiler's freed memory in the process
(a few MB more peak RSS in a parse, measured).  So the benchmark scripts compile first.

:func:`speed`: how fast the machine is right now, printed beside the load average, so that
runs taken at different times can be compared (a shared machine's speed drifts by a quarter
within an evening, with the load average unchanged).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Sequence
from pathlib import Path

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


def load_average() -> float:
    """The 1-minute load average now (NaN where the system has none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


#: run in ``python``: its version, the versions of the distributions named in argv, and which
#: of tracekit's native modules it loads (TRACEKIT_PURE_PYTHON included, as the measured
#: children inherit it)
_VERSIONS = """
import importlib.metadata as md, json, platform, sys
out = {"python": platform.python_version(), "packages": {}, "native": None, "modules": []}
for name in sys.argv[1:]:
    try:
        out["packages"][name] = md.version(name)
    except md.PackageNotFoundError:
        out["packages"][name] = None
try:
    from tracekit import native
except ImportError:
    pass
else:
    out["modules"] = list(native.MODULES)
    out["native"] = [m for m in native.MODULES if native.load(m) is not None]
print(json.dumps(out))
"""


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gb() -> float | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    except (ValueError, OSError, AttributeError):
        return None


def _native_text(native: list[str] | None, modules: list[str]) -> str:
    if native is None:
        return "tracekit not importable"
    if len(native) == len(modules):
        return f"all {len(modules)} in use"
    if not native:
        return "none in use (pure Python)"
    missing = [m for m in modules if m not in native]
    return f"{', '.join(native)} in use; pure Python for {', '.join(missing)}"


def machine_line(
    python: str,
    packages: Sequence[str] = ("polars",),
    loads: Sequence[tuple[str, float]] = (),
    speeds: Sequence[tuple[str, tuple[float, float]]] = (),
) -> str:
    """The machine line a benchmark prints above its table.

    ``python`` is the interpreter the measured children run (its versions and native modules
    are read in a child, so the caller's own memory stays small); ``packages`` are the
    distributions whose versions matter to this benchmark; ``loads`` the 1-minute load averages
    read before and after (labelled), ``speeds`` the :func:`speed` readings, if taken."""
    done = subprocess.run([python, "-c", _VERSIONS, *packages], capture_output=True, text=True, check=True)
    info = json.loads(done.stdout.strip().splitlines()[-1])
    versions = ", ".join(f"{name} {version or 'not installed'}" for name, version in info["packages"].items())
    memory = _memory_gb()
    parts = [
        f"Machine: {platform.system()} {platform.machine()}, {_cpu_model()}, {os.cpu_count()} CPUs"
        + (f", {memory:.0f} GB RAM" if memory is not None else ""),
        f"Python {info['python']}" + (f", {versions}" if versions else ""),
        f"native modules: {_native_text(info['native'], info['modules'])}",
    ]
    if loads:
        parts.append("1-minute load average " + ", ".join(f"{value:.2f} {label}" for label, value in loads))
    line = "; ".join(parts) + "."
    return line + (f" {speed_text(list(speeds))}" if speeds else "")
