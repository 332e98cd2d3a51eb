"""Trace format readers: each turns one input file into :class:`tracekit.schema.TraceTables`.

This package sits at the bottom of tracekit: it imports only ``tracekit.schema`` and
``tracekit.errors``.  It ships inside the wheel as ``tracekit.parsers``.

* :mod:`.kineto`: PyTorch profiler (Kineto) Chrome traces, ``.json`` / ``.json.gz``,
  every vintage since PyTorch 1.8.
* :mod:`.nsight`: Nsight Systems SQLite exports (and ``.nsys-rep`` via ``nsys export``).

:func:`detect_format` sniffs a file; :func:`parse` dispatches to the right reader.
"""

from __future__ import annotations

from pathlib import Path

from tracekit.errors import TraceFormatError
from tracekit.schema import TraceTables

from ._source import ProgressSink, sniff

#: formats tracekit reads, by the name used in TraceInfo.format
FORMATS = ("kineto", "nsys", "nsys-rep")

_NSYS_REP_SUFFIXES = (".nsys-rep", ".qdrep")


def detect_format(path: str | Path) -> str:
    """Return ``"kineto"``, ``"nsys"`` or ``"nsys-rep"`` for ``path``, or raise TraceFormatError."""
    p = Path(path)
    head = sniff(p)
    if head.is_sqlite:
        return "nsys"
    if p.name.lower().endswith(_NSYS_REP_SUFFIXES):
        return "nsys-rep"
    if head.is_json:
        return "kineto"
    if head.size == 0 or not head.head.strip():
        raise TraceFormatError("the file is empty", path=p, hint="expected a PyTorch profiler trace (.json/.json.gz) or an Nsight Systems export (.sqlite)")
    kind = "gzip-compressed data" if head.gzip else "data"
    raise TraceFormatError(
        f"unrecognised {kind}: not a JSON trace, not an SQLite export",
        path=p,
        hint="tracekit reads PyTorch profiler Chrome traces (.json, .json.gz) and Nsight Systems exports (.sqlite, .nsys-rep)",
    )


def parse(
    path: str | Path, *, format: str | None = None, work_dir: str | Path | None = None, progress: ProgressSink | None = None
) -> TraceTables:
    """Parse ``path`` into canonical tables.

    Args:
        path: the trace file.
        format: skip detection and use this reader (one of :data:`FORMATS`).
        work_dir: where a ``.nsys-rep`` may be exported to SQLite (the cache folder).
        progress: told the reading phases and the bytes read (see :mod:`tracekit.progress`).
    """
    fmt = format or detect_format(path)
    if fmt == "kineto":
        from .kineto import read_kineto

        return read_kineto(path, progress=progress)
    if fmt == "nsys":
        from .nsight import read_nsight

        return read_nsight(path, progress=progress)
    if fmt == "nsys-rep":
        from .nsight import read_nsys_rep

        return read_nsys_rep(path, work_dir=work_dir, progress=progress)
    raise TraceFormatError(f"unknown format {fmt!r} (expected one of {', '.join(FORMATS)})", path=path)


__all__ = ["FORMATS", "detect_format", "parse"]
