"""Reading traces: the public ``read_trace`` entry point (format detection + cache).

>>> import tracekit
>>> tables = tracekit.read_trace("sample_traces/synthetic/healthy.kineto.json", cache=False)
>>> tables.info.format
'kineto'
>>> tables.events.filter(kind="kernel").height > 0
True
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..parsers import detect_format, parse
from ..progress import Progress
from ..schema import TraceTables
from . import cache as _cache


def read_trace(path: str | Path, *, cache: bool = True, format: str | None = None, progress: Progress | None = None) -> TraceTables:
    """Read one trace file into canonical tables.

    Args:
        path: a Kineto trace (``.json``, ``.json.gz``), an Nsight Systems export
            (``.sqlite``) or report (``.nsys-rep``, needs ``nsys`` on PATH).
        cache: use the content-keyed cache (see :mod:`tracekit.reading.cache`): the
            second read of the same bytes skips parsing.
        format: force a reader (``kineto``, ``nsys``, ``nsys-rep``) instead of sniffing.
        progress: told each phase (``hashing``, ``loading cached tables``, ``reading``,
            ``decoding``, ``caching``) and the bytes read; see :mod:`tracekit.progress`.

    Raises:
        tracekit.errors.TracekitError: the file is missing, not a trace, or corrupt.

    Example (from the repository root)::

        >>> import tracekit
        >>> tables = tracekit.read_trace("sample_traces/synthetic/dataloader_stall.kineto.json")
        >>> tables.info.format, tables.info.world_size
        ('kineto', 1)
        >>> tables.events.height
        602
        >>> tracekit.read_trace("sample_traces/missing.json")
        Traceback (most recent call last):
        ...
        tracekit.errors.TraceNotFoundError: sample_traces/missing.json: no such file
    """
    p = Path(path)
    if not cache:
        tables: TraceTables = parse(p, format=format or detect_format(p), work_dir=None, progress=progress)
        return tables
    try:
        before = os.stat(p)
    except OSError:
        before = None
    if before is None or not stat.S_ISREG(before.st_mode):
        # not a regular file: the reader names the problem (missing, a folder, ...)
        direct: TraceTables = parse(p, format=format or detect_format(p), work_dir=None, progress=progress)
        return direct
    # the same file at the same path, unchanged since it was hashed: its key without hashing
    key = _cache.known_key(p, before)
    if key is not None:
        if progress is not None:
            progress.phase("loading cached tables")
        hit = _cache.load(key, p)
        if hit is not None:
            return hit
    # only now: a cached file was a trace when it was stored (its key is of its bytes)
    fmt = format or detect_format(p)
    if progress is not None:
        progress.phase("hashing", total=before.st_size)
    key = _cache.content_key(p, progress=progress)
    _cache.remember(p, before, key)
    if progress is not None:
        progress.phase("loading cached tables")
    hit = _cache.load(key, p)
    if hit is not None:
        return hit
    # one export folder per report content: reports that share a file name never share an export
    work_dir = _cache.cache_dir() / "exports" / key
    tables = parse(p, format=fmt, work_dir=work_dir, progress=progress)
    if progress is not None:
        progress.phase("caching")
    _cache.store(key, tables)
    return tables
