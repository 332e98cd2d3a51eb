"""One harness in this process: under atheris (``fuzz``), or over files (``replay``, for the
coverage build, the regression tests and a crash's reproduction)."""

from __future__ import annotations

import sys
from pathlib import Path

from . import build
from .harnesses import HARNESSES, Harness


def _warm(h: Harness) -> None:
    """Import what the harness runs before the first input (its time is not the input's)."""
    import networkx  # noqa: F401
    import polars  # noqa: F401

    import tracekit.analysis
    import tracekit.parsers.kineto
    import tracekit.reading.cache  # noqa: F401


def fuzz(name: str, libfuzzer_args: list[str]) -> None:
    """atheris over harness ``name`` with the sanitizer build; never returns."""
    import atheris

    h = HARNESSES[name]
    atheris.Setup([sys.argv[0], *libfuzzer_args], h.run)
    if h.module is not None:  # a native harness: the sanitizer build, its edges to libFuzzer
        build.use("asan", attach=h.module)
    if h.instrument:
        with atheris.instrument_imports(include=list(h.instrument)):
            _warm(h)
    else:
        _warm(h)
    atheris.Fuzz()


def replay(name: str, paths: list[Path], kind: str | None) -> int:
    """Every input file (or every file of a folder) through harness ``name``; with ``kind``,
    that build's modules in place of the installed ones.  Answers the inputs run."""
    if kind is not None:
        build.use(kind)
    h = HARNESSES[name]
    _warm(h)
    files = sorted(f for p in paths for f in ([p] if p.is_file() else p.iterdir()) if f.is_file())
    ran = 0
    for f in files:
        try:
            data = f.read_bytes()
        except FileNotFoundError:  # (a running campaign replaced it by a smaller input)
            continue
        h.run(data)
        ran += 1
    return ran
