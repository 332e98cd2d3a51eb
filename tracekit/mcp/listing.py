"""The ``list_traces`` tool's answer: the trace files under a folder and the jobs they form.

The folder is searched as ``tracekit batch`` searches one (recursively, trace names only,
hidden folders skipped, links to folders not followed: :func:`tracekit.batch.discover.discover`).
Each file's format is sniffed from its first 64 kB (a JSON file without ``"traceEvents"``
there is listed as ``json``, with why it is probably no trace), nothing more is read, so the
listing is fast on any archive.  Jobs are grouped as :func:`tracekit.reading.job.group_jobs` groups them
from what is known without parsing: capture folders (``metadata.json``) and rank numbers in
file names.  ``analyze`` on a job's folder reads the traces and may refine the ranks (from the
trace's own distributed info).  Files that are links to somewhere outside the server's roots
are left out and counted.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import TracekitError
from .access import Roots

# the key every Kineto trace has near its start (what tells it from other JSON files)
_TRACE_EVENTS = b'"traceEvents"'


def list_folder(folder: Path, roots: Roots, cap: int) -> dict[str, Any]:
    """The listing of ``folder`` (already checked against ``roots``), at most ``cap`` files and jobs."""
    from ..batch.discover import discover
    from ..reading.job import FileMeta, group_jobs, rank_from_name

    found = discover([str(folder)])
    files: list[dict[str, Any]] = []
    metas: list[FileMeta] = []
    outside = 0
    for path in found.files:
        if not roots.contains(Path(path).resolve()):
            outside += 1
            continue
        fmt, problem = _format(path)
        rel = os.path.relpath(path, folder)
        entry: dict[str, Any] = {"path": rel, "format": fmt, "size_bytes": os.path.getsize(path), "rank_in_name": rank_from_name(os.path.basename(path))}
        if problem is not None:
            entry["problem"] = problem
        files.append(entry)
        if problem is None and fmt is not None:
            metas.append(FileMeta(path=path, format="nsys" if fmt.startswith("nsys") else fmt))
    plans = group_jobs(metas, found.captures, relative_to=str(folder))
    jobs = [
        {
            "name": plan.name,
            "folder": os.path.relpath(plan.folder, folder),
            "files": [os.path.relpath(p, folder) for p in sorted(plan.members)],
            "ranks": list(plan.ranks),
            "capture": plan.capture is not None,
            "world_size": plan.world_size,
        }
        for plan in plans
    ]
    out: dict[str, Any] = {
        "folder": str(folder),
        "traces": files[:cap],
        "jobs": jobs[:cap],
        "ignored_files": found.ignored,
        "links_outside_roots": outside,
    }
    cut = {k: n for k, n in (("traces", len(files)), ("jobs", len(jobs))) if n > cap}
    if cut:
        out["truncated"] = cut
    return out


def _format(path: str) -> tuple[str | None, str | None]:
    """The file's format and, when it is not a trace, why (from its first 64 kB only)."""
    from ..parsers import detect_format
    from ..parsers._source import sniff

    try:
        fmt = detect_format(path)
        if fmt == "kineto" and _TRACE_EVENTS not in sniff(path).head:
            return "json", 'JSON without a "traceEvents" key in its first 64 kB: probably not a profiler trace'
    except TracekitError as exc:
        return None, exc.message
    return fmt, None


__all__ = ["list_folder"]
