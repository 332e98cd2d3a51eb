"""Nsight Systems SQLite exports (``nsys export --type sqlite``) → canonical tables.

Reads exports written by nsys 2020.x–2026.x (export schema 2.x–3.30).  The schema drifts
with every release and ``--lazy`` exports create only non-empty tables, so every table
and column is looked up by name and anything absent reads as null.  Each table is read
with one query; all decoding and joining happens in polars, never row by row in Python.
With the optional ``adbc-driver-sqlite`` (``pip install tracekit-gpu[nsight]``) a query's
result arrives as Arrow columns; a query the Arrow driver cannot answer exactly (damaged
text, a type it rejects) and every query without the package go through :mod:`sqlite3`.

What goes where:

* ``CUPTI_ACTIVITY_KIND_RUNTIME`` (and ``_DRIVER`` when an export has it): eventClass 0
  → ``runtime``, 1 → ``driver``; the duplicate ``eventClass = 67`` backtrace rows of
  2022-era exports are dropped; ``_v\\d+`` version suffixes are stripped from names.
* ``_KERNEL``, ``_MEMCPY``, ``_MEMSET`` → GPU rows placed by (device, stream) with the
  launching process's pid and a null tid.
* ``_SYNCHRONIZATION`` → ``sync`` rows on the waiting host thread: pid from globalPid,
  tid from globalTid when present, otherwise from the runtime call with the same
  (pid, correlationId).  The ``4294967295`` "not applicable" stream and event ids are null.
* ``NVTX_EVENTS``: push/pop (59) and start/end (60) ranges → ``annotation`` with the
  domain name from the domain-create rows (75; the default domain reads as null);
  marks (34) → ``instant``; thread-name rows (39) name threads.  Text is
  ``COALESCE(text, StringIds[textId])``.  Ranges that never ended are dropped (warned).
* ``OSRT_API`` → ``os_call``; ``PROFILER_OVERHEAD`` and the profiler-caused rows of
  ``CUPTI_ACTIVITY_KIND_OVERHEAD`` → ``overhead`` (its CUDA-caused rows such as
  "Command Buffer Full" → ``other``).
* Launch links join API calls to GPU rows on **(pid, correlationId)**: correlation ids
  are unique only within a process.

Times: the export's session-relative nanoseconds plus
``TARGET_INFO_SESSION_START_TIME.utcEpochNs`` (unless the export was already written with
``--ts-normalize``), so Nsight and Kineto traces share one epoch clock.

Ranks: each process with CUDA or NVTX activity is a rank, numbered by its position in
the sorted list of those pids.  When every such process has named one of its threads
``MPI Rank N`` / ``Rank N`` through NVTX (and the numbers are distinct), those numbers
are used instead.  Rows of other processes (OS calls of helper processes) get rank 0.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sqlite3
import subprocess
import tempfile
from pathlib import Path

import polars as pl

from tracekit.errors import ExternalToolError, TraceCorruptError, TraceFormatError, TraceNotFoundError
from tracekit.schema import EVENT_KIND, TraceInfo, TraceTables, finalize_events

from ._nsight_activity import (
    cupti_overhead_rows,
    kernel_rows,
    memcpy_rows,
    memset_rows,
    osrt_rows,
    profiler_overhead_rows,
    runtime_rows,
    sync_rows,
)
from ._nsight_db import Db, close_quietly, open_arrow
from ._nsight_derived import devices_table, links_table, orphan_warning, ranks_of, threads_table
from ._nsight_export import Export
from ._nsight_nvtx import nvtx_rows
from ._nsight_schema import BULK_READS, I32, I64, STRINGS_SPEC
from ._source import ProgressSink, check_path

__all__ = ["read_nsight", "read_nsys_rep"]

#: exports smaller than this are read in the calling thread only
_PREFETCH_MIN_BYTES = 8 << 20


def read_nsight(path: str | Path, *, progress: ProgressSink | None = None) -> TraceTables:
    """Read an Nsight Systems SQLite export into canonical tables.

    Raises:
        TraceNotFoundError: the file does not exist or cannot be read.
        TraceFormatError: the file is SQLite but not an Nsight Systems export.
        TraceCorruptError: the SQLite file is damaged.
    """
    p = check_path(path)
    uri = p.resolve().as_uri() + "?mode=ro&immutable=1"
    if progress is not None:  # SQLite reads the file itself: no byte count, the phase only
        progress.phase("reading")
    try:
        con = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as exc:  # pragma: no cover - connect is lazy; failures surface on first query
        raise TraceNotFoundError(f"cannot open SQLite file: {exc}", path=path) from exc
    # text is decoded leniently: a damaged byte in a name must not cost the whole export
    con.text_factory = _lenient_text
    arrow = open_arrow(uri)
    db: Db | None = None
    try:
        db = Db(con, arrow, uri)
        return _read(Export(db, str(path), p.stat().st_size))
    except sqlite3.DatabaseError as exc:
        raise _database_error(exc, path) from exc
    except UnicodeDecodeError as exc:  # damaged schema text (table or column names)
        raise TraceCorruptError(f"the SQLite schema is damaged ({exc.reason} at byte {exc.start})", path=path) from exc
    finally:
        if db is not None:
            db.close()  # the background reads, their connections, both connections
        else:
            con.close()
            if arrow is not None:
                close_quietly(arrow)


def read_nsys_rep(path: str | Path, work_dir: str | Path | None = None, *, progress: ProgressSink | None = None) -> TraceTables:
    """Read a binary Nsight Systems report (``.nsys-rep``, ``.qdrep``) through ``nsys export``.

    The report is exported to ``<work_dir or a temporary folder>/<stem>.sqlite`` with
    NVIDIA's ``nsys`` (which must be on PATH) and the export is read with
    :func:`read_nsight`.  Without ``nsys`` an :class:`ExternalToolError` gives the
    commands to run by hand.
    """
    p = check_path(path)
    nsys = shutil.which("nsys")
    if nsys is None:
        out = p.with_name(p.stem + ".sqlite")
        export = shlex.join(["nsys", "export", "--type", "sqlite", "--output", str(out), str(p)])
        raise ExternalToolError(
            f"{p.name} is a binary Nsight Systems report, which only NVIDIA's `nsys` can read, and `nsys` "
            f"is not on PATH. Export it to SQLite, then analyze the export:\n"
            f"    {export}\n"
            f"    tracekit analyze {shlex.quote(str(out))}",
            path=path,
            hint="install Nsight Systems (or run the export where the report was captured) and put `nsys` on PATH",
        )
    if work_dir is not None:
        out_dir = Path(work_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        if progress is not None:
            progress.phase("exporting with nsys")
        return read_nsight(_export(nsys, p, out_dir / (p.stem + ".sqlite"), path), progress=progress)
    with tempfile.TemporaryDirectory(prefix="tracekit-nsys-") as tmp:
        if progress is not None:
            progress.phase("exporting with nsys")
        return read_nsight(_export(nsys, p, Path(tmp) / (p.stem + ".sqlite"), path), progress=progress)


def _export(nsys: str, report: Path, out: Path, shown: str | Path) -> Path:
    if out.exists():
        if out.stat().st_mtime >= report.stat().st_mtime:
            return out  # exported before from this very report
        out.unlink()
    # export beside the final name, then rename: a concurrent run never reads half an export
    partial = out.with_name(f"{out.stem}.{os.getpid()}.partial.sqlite")
    cmd = [nsys, "export", "--type", "sqlite", "--output", str(partial), str(report)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise ExternalToolError(f"could not run `{shlex.join(cmd)}`: {exc}", path=shown) from exc
    if proc.returncode != 0 or not partial.exists():
        partial.unlink(missing_ok=True)
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-5:]
        detail = ("; ".join(tail)) or f"exit status {proc.returncode}"
        raise ExternalToolError(f"`{shlex.join(cmd)}` failed: {detail}", path=shown)
    os.replace(partial, out)
    return out


def _database_error(exc: sqlite3.DatabaseError, path: str | Path) -> Exception:
    text = str(exc)
    damaged = ("malformed", "not a database", "disk i/o", "corrupt", "encrypted", "disk image", "short read")
    if not isinstance(exc, sqlite3.OperationalError) or any(w in text.lower() for w in damaged):
        return TraceCorruptError(f"the SQLite database is damaged ({text})", path=path)
    if "unable to open" in text.lower():
        return TraceNotFoundError(f"cannot open SQLite file ({text})", path=path)
    return TraceCorruptError(f"the SQLite export could not be read ({text})", path=path)


def _lenient_text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _read(export: Export) -> TraceTables:
    """The canonical tables of an open export."""
    db = export.db
    if not any(t.startswith(("CUPTI_ACTIVITY_KIND_", "NVTX_")) or t == "StringIds" for t in db.tables):
        raise TraceFormatError(
            "SQLite database without Nsight Systems tables (no CUPTI_ACTIVITY_KIND_*, NVTX_EVENTS or StringIds)",
            path=export.shown_path,
            hint="export an Nsight Systems report with `nsys export --type sqlite --output report.sqlite report.nsys-rep`",
        )
    about = db.key_values("META_DATA_EXPORT") or db.key_values("EXPORT_META_DATA")
    utc = db.scalar("TARGET_INFO_SESSION_START_TIME", "utcEpochNs")
    # exported with --ts-normalize: times are already UTC-based
    normalized = any(
        about.get(k, "").lower() == "true" for k in ("EXPORT_PARAM_TIME_NORMALIZE", "EXPORT_TIME_NORMALIZE")
    )
    offset = int(utc) if isinstance(utc, int) and not normalized else 0
    if export.size >= _PREFETCH_MIN_BYTES:  # below, the threads and connections cost more than they save
        db.prefetch(BULK_READS)
    export.read_strings(STRINGS_SPEC)

    events, nvtx_threads = _events(export)
    # column by column: ``with_columns`` would first copy the whole concatenation
    # into one chunk per column, which the canonical sort does anyway
    if offset:
        events.replace_column(events.get_column_index("start_ns"), events.get_column("start_ns") + offset)

    ranks, rank_source = ranks_of(events, nvtx_threads)
    if ranks:
        rank = events.get_column("pid").replace_strict(ranks, default=0, return_dtype=I32).fill_null(0)
    else:
        rank = pl.repeat(0, events.height, dtype=I32, eager=True)
    events = events.hstack([rank.alias("rank")]).with_row_index("_order")
    events = finalize_events(events)
    links = links_table(events)
    orphan_warning(export, events, links)

    devices = devices_table(export, events)
    threads = threads_table(export, events, nvtx_threads)
    rank_values = tuple(sorted(set(ranks.values()))) or (0,)
    start = events["start_ns"].min() if events.height else None
    end = events["end_ns"].max() if events.height else None
    metadata: dict[str, object] = {
        "export": about,
        "clock": "utc_epoch" if (offset or normalized) else "session",
        "session_start_utc_ns": utc if isinstance(utc, int) else None,
        "rank_pids": {str(r): pid for pid, r in sorted(ranks.items(), key=lambda kv: kv[1])},
        "rank_source": rank_source,
        "tables": sorted(export.read_tables),
    }
    if not offset and not normalized:
        export.warnings.append(
            "the export has no TARGET_INFO_SESSION_START_TIME: times are session-relative and cannot be "
            "aligned with other traces"
        )
    product = about.get("EXPORT_PRODUCT_VERSION")
    info = TraceInfo(
        path=export.shown_path,
        format="nsys",
        format_version=about.get("EXPORT_SCHEMA_VERSION"),
        producer=f"nsys {product}" if product else None,
        rank=rank_values[0] if len(rank_values) == 1 else None,
        ranks=rank_values,
        start_ns=int(start) if isinstance(start, int) else None,
        end_ns=int(end) if isinstance(end, int) else None,
        warnings=tuple(export.warnings),
        metadata=metadata,
    )
    return TraceTables(info=info, events=events, links=links, devices=devices, threads=threads)


def _events(export: Export) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Every event table as one frame (session times), and the NVTX thread names.

    Built here so that the per-table frames are released before the big sort.
    """
    runtime = runtime_rows(export)
    nvtx, nvtx_threads = nvtx_rows(export)
    sources = [
        runtime,
        kernel_rows(export),
        memcpy_rows(export),
        memset_rows(export),
        sync_rows(export, runtime),
        nvtx,
        osrt_rows(export),
        profiler_overhead_rows(export),
        cupti_overhead_rows(export),
    ]
    frames = [f for f in sources if f.height]
    if not frames:
        return pl.DataFrame(
            schema={"kind": EVENT_KIND, "start_ns": I64, "dur_ns": I64, "pid": I64}
        ), nvtx_threads
    return pl.concat(frames, how="diagonal_relaxed"), nvtx_threads
